import Database
import Dispatch
import Foundation
import PurchaseDomain

/// Owns one connection and runs every database call on its own serial queue, off Swift's cooperative
/// pool (the C calls block). A connection found lost is dropped and reopened on the next call.
///
/// `@unchecked Sendable`: `connection` is only touched on `queue`.
final class StoreExecutor: @unchecked Sendable {
    private let queue: DispatchQueue
    private let open: @Sendable () throws -> any SQLConnection
    private var connection: (any SQLConnection)?

    init(label: String, open: @escaping @Sendable () throws -> any SQLConnection) {
        self.queue = DispatchQueue(label: label)
        self.open = open
    }

    func run<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [self] in
                do {
                    let connection = try self.connection ?? open()
                    self.connection = connection
                    continuation.resume(returning: try body(connection))
                } catch let error as DatabaseError {
                    if error.isConnectionLost { self.connection = nil }
                    continuation.resume(throwing: error)
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}

/// Times are stored as milliseconds since 1970 in BIGINT columns, the same in both engines.
enum PurchaseTime {
    static func milliseconds(_ date: Date) -> Int64 { EpochMilliseconds.milliseconds(date) }
    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
