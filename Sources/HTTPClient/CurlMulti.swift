import CCurl

/// One libcurl multi handle: runs many transfers on the calling thread, over a cache of kept-alive connections that
/// the transfers share. Owns the handle and frees it in `deinit`.
///
/// `@unchecked Sendable`: `HTTPClient`'s thread alone calls it, except `wakeup()`, which libcurl lets any thread call.
final class CurlMulti: @unchecked Sendable {
    private let handle: UnsafeMutableRawPointer

    /// - Parameter maxConnections: connections open at once, and kept alive between transfers.
    init(maxConnections: Int) throws(HTTPClient.Failure) {
        guard CurlEasy.globalInit == CURLE_OK else { throw HTTPClient.Failure("libcurl did not initialise: \(CurlEasy.describe(CurlEasy.globalInit))") }
        guard let handle = curl_multi_init() else { throw HTTPClient.Failure("libcurl could not make a multi handle") }
        self.handle = handle
        // One request per connection, as with a connection per thread: a multi handle would otherwise multiplex
        // HTTP/2 requests over one connection, whose failure would fail them all at once.
        for (option, value) in [(CURLMOPT_MAX_TOTAL_CONNECTIONS, maxConnections), (CURLMOPT_MAXCONNECTS, maxConnections),
                                (CURLMOPT_PIPELINING, Int(CURLPIPE_NOTHING))] {
            let code = iap_curl_multi_setopt_long(handle, option, value)
            guard code == CURLM_OK else { throw HTTPClient.Failure("cannot set up the multi handle: \(Self.describe(code))") }
        }
    }

    deinit { curl_multi_cleanup(handle) }

    /// Starts `easy`'s transfer (prepared with `CurlEasy.prepare`); nil, or why it cannot.
    func add(_ easy: CurlEasy) -> HTTPClient.Failure? {
        let code = curl_multi_add_handle(handle, easy.handle)
        return code == CURLM_OK ? nil : HTTPClient.Failure("cannot start the request: \(Self.describe(code))")
    }

    /// Moves every transfer on as far as it can go without waiting.
    func perform() {
        var running: Int32 = 0
        _ = curl_multi_perform(handle, &running)
    }

    /// A transfer that ended, and how; taken out of the multi handle. Nil when none is left to report.
    func nextDone() -> (easy: UnsafeMutableRawPointer, result: CURLcode)? {
        var left: Int32 = 0
        while let message = curl_multi_info_read(handle, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = message.pointee.data.result
            curl_multi_remove_handle(handle, easy)
            return (easy, result)
        }
        return nil
    }

    /// Waits until a transfer's socket is ready, libcurl has a timeout due, `wakeup()` is called, or `milliseconds` pass;
    /// false when it could not wait.
    func poll(milliseconds: Int32) -> Bool {
        var ready: Int32 = 0
        return curl_multi_poll(handle, nil, 0, milliseconds, &ready) == CURLM_OK
    }

    /// Ends a `poll` now (or the next one at once): from any thread.
    func wakeup() { _ = curl_multi_wakeup(handle) }

    private static func describe(_ code: CURLMcode) -> String { String(cString: curl_multi_strerror(code)) }
}
