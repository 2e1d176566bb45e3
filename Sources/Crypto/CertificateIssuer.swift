import COpenSSL
import Foundation

/// Issues X.509 certificates: a certificate authority of one's own, for tests and local demos.
public enum CertificateIssuer {
    /// What a new certificate says.
    public struct Request: Sendable {
        public var commonName: String
        public var isCA: Bool
        public var notBefore: Date
        public var notAfter: Date
        /// Dotted OIDs of extra, non-critical extensions whose value is a DER NULL
        /// (as Apple's marker extensions are).
        public var markerExtensionOIDs: [String]
        public var serial: Int
        /// An OCSP responder URL for the Authority Information Access extension.
        public var ocspURL: String?

        public init(commonName: String, isCA: Bool, notBefore: Date, notAfter: Date,
                    markerExtensionOIDs: [String] = [], serial: Int = Int.random(in: 1...Int(Int32.max)), ocspURL: String? = nil) {
            self.ocspURL = ocspURL
            self.commonName = commonName
            self.isCA = isCA
            self.notBefore = notBefore
            self.notAfter = notAfter
            self.markerExtensionOIDs = markerExtensionOIDs
            self.serial = serial
        }
    }

    /// Issues a certificate for `subjectKey`, signed by `issuer` (self-signed when `nil`).
    public static func issue(_ request: Request, subjectKey: PrivateKey, issuer: (certificate: Certificate, key: PrivateKey)?) throws -> Certificate {
        guard let certificate = X509_new() else { throw CryptoError.openSSL("X509_new") }
        var owned: OpaquePointer? = certificate
        defer { if let owned { X509_free(owned) } }

        guard X509_set_version(certificate, 2) == 1,
              ASN1_INTEGER_set(X509_get_serialNumber(certificate), request.serial) == 1,
              ASN1_TIME_set(X509_getm_notBefore(certificate), time_t(request.notBefore.timeIntervalSince1970)) != nil,
              ASN1_TIME_set(X509_getm_notAfter(certificate), time_t(request.notAfter.timeIntervalSince1970)) != nil,
              X509_set_pubkey(certificate, subjectKey.pointer) == 1
        else { throw CryptoError.openSSL("certificate fields") }

        guard let name = X509_NAME_new() else { throw CryptoError.openSSL("X509_NAME_new") }
        defer { X509_NAME_free(name) }
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, "iap-pipeline test PKI", -1, -1, 0)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, request.commonName, -1, -1, 0)
        X509_set_subject_name(certificate, name)
        X509_set_issuer_name(certificate, issuer.map { X509_get_subject_name($0.certificate.pointer) } ?? name)

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.certificate.pointer ?? certificate, certificate, nil, nil, 0)
        var extensions: [(Int32, String)] = [
            (NID_basic_constraints, request.isCA ? "critical,CA:TRUE" : "critical,CA:FALSE"),
            (NID_key_usage, request.isCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"),
            (NID_subject_key_identifier, "hash"),
        ]
        if issuer != nil { extensions.append((NID_authority_key_identifier, "keyid:always")) }
        if let url = request.ocspURL { extensions.append((NID_info_access, "OCSP;URI:\(url)")) }
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else { throw CryptoError.openSSL("extension \(nid)") }
            X509_add_ext(certificate, ext, -1)
            X509_EXTENSION_free(ext)
        }
        for oid in request.markerExtensionOIDs { try addMarkerExtension(oid, to: certificate) }

        let signingKey = issuer?.key ?? subjectKey
        guard withExtendedLifetime((subjectKey, signingKey, issuer?.certificate), { X509_sign(certificate, signingKey.pointer, EVP_sha256()) }) > 0 else {
            throw CryptoError.openSSL("X509_sign")
        }
        owned = nil
        return Certificate(owning: certificate)
    }

    private static func addMarkerExtension(_ oid: String, to certificate: OpaquePointer) throws {
        guard let object = OBJ_txt2obj(oid, 1) else { throw CryptoError.openSSL("OID \(oid)") }
        defer { ASN1_OBJECT_free(object) }
        guard let value = ASN1_OCTET_STRING_new() else { throw CryptoError.openSSL("ASN1_OCTET_STRING_new") }
        defer { ASN1_OCTET_STRING_free(value) }
        let derNull: [UInt8] = [0x05, 0x00]
        ASN1_OCTET_STRING_set(value, derNull, Int32(derNull.count))
        guard let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, value) else { throw CryptoError.openSSL("extension \(oid)") }
        defer { X509_EXTENSION_free(ext) }
        X509_add_ext(certificate, ext, -1)
    }
}
