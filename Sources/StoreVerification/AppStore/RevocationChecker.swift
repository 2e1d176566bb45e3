import Crypto
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// OCSP checks of the leaf and intermediate certificates, for verifiers with online checks on.
/// An unreachable or unusable responder is a retryable failure; a revoked certificate is not.
struct RevocationChecker: Sendable {
    let timeout: Duration

    func check(leaf: Certificate, intermediate: Certificate, roots: [Certificate]) -> Result<Void, Rejection> {
        guard let root = roots.first(where: { $0.isIssuer(of: intermediate) }) else {
            return .failure(Rejection(.untrustedChain, "no configured root issued the intermediate"))
        }
        return check(leaf, issuer: intermediate, roots: roots).flatMap { check(intermediate, issuer: root, roots: roots) }
    }

    private func check(_ certificate: Certificate, issuer: Certificate, roots: [Certificate]) -> Result<Void, Rejection> {
        guard let url = OCSP.responderURLs(of: certificate).first.flatMap(URL.init(string:)) else {
            return .failure(Rejection(.revocationCheckFailed, "\(certificate.subject) names no OCSP responder"))
        }
        let request: Data
        do {
            request = try OCSP.request(for: certificate, issuer: issuer)
        } catch {
            return .failure(Rejection(.revocationCheckFailed, "cannot build OCSP request: \(error)"))
        }
        switch post(request, to: url) {
        case .failure(let rejection):
            return .failure(rejection)
        case .success(let response):
            switch OCSP.status(of: response, for: certificate, issuer: issuer, roots: roots) {
            case .good: return .success(())
            case .revoked: return .failure(Rejection(.certificateRevoked, "\(certificate.subject) is revoked (OCSP)"))
            case .unknown: return .failure(Rejection(.revocationCheckFailed, "OCSP responder does not know \(certificate.subject)"))
            case .invalidResponse(let why): return .failure(Rejection(.revocationCheckFailed, retryable: true, "OCSP: \(why)"))
            }
        }
    }

    /// POSTs the request and waits, at most `timeout`, for the answer. Blocking: online checks are opt-in
    /// and bounded, and the result is cached with the chain.
    private func post(_ body: Data, to url: URL) -> Result<Data, Rejection> {
        var request = URLRequest(url: url, timeoutInterval: timeout.seconds + 0.5)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue("application/ocsp-request", forHTTPHeaderField: "Content-Type")
        let outcome = OCSPOutcome()
        let done = DispatchSemaphore(value: 0)
        let task = URLSession.shared.dataTask(with: request) { data, response, error in
            if let error {
                outcome.set(.failure(Rejection(.revocationCheckFailed, retryable: true, "OCSP responder \(url.host ?? ""): \(error.localizedDescription)")))
            } else if let http = response as? HTTPURLResponse, http.statusCode == 200, let data {
                outcome.set(.success(data))
            } else {
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                outcome.set(.failure(Rejection(.revocationCheckFailed, retryable: true, "OCSP responder answered HTTP \(status)")))
            }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + timeout.seconds) == .timedOut {
            task.cancel()
            return .failure(Rejection(.revocationCheckFailed, retryable: true, "OCSP responder did not answer within \(timeout)"))
        }
        return outcome.value ?? .failure(Rejection(.revocationCheckFailed, retryable: true, "no OCSP answer"))
    }
}

/// The completion handler's result, handed across threads.
private final class OCSPOutcome: Sendable {
    private let storage = Mutex<Result<Data, Rejection>?>(nil)
    func set(_ result: Result<Data, Rejection>) { storage.withLock { $0 = result } }
    var value: Result<Data, Rejection>? { storage.withLock { $0 } }
}
