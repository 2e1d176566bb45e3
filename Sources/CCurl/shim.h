#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed wrapper per argument type.
static inline CURLcode iap_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode iap_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode iap_curl_setopt_write_function(CURL *handle, size_t (*function)(char *, size_t, size_t, void *)) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, function);
}
static inline CURLcode iap_curl_response_code(CURL *handle, long *code) {
    return curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code);
}
static inline CURLcode iap_curl_retry_after(CURL *handle, curl_off_t *seconds) {
    return curl_easy_getinfo(handle, CURLINFO_RETRY_AFTER, seconds);
}
// The value of the last response's `name` header as it was sent, or NULL (libcurl ≥ 7.84's header API).
static inline const char *iap_curl_header_value(CURL *handle, const char *name) {
    struct curl_header *header = NULL;
    return curl_easy_header(handle, name, 0, CURLH_HEADER, -1, &header) == CURLHE_OK && header ? header->value : NULL;
}
static inline CURLcode iap_curl_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
// curl_multi_setopt is variadic too.
static inline CURLMcode iap_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
