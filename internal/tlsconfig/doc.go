// Package tlsconfig builds the TLS configurations of serve's and route's listeners and of
// the router's connections to its replicas from PEM files, and fails at start, with the flag
// and the file named, when they are wrong: a certificate without its key, a key that does not
// match, a CA file that holds no certificate, an expired leaf.
//
// Why a package of its own: serve (internal/server) and route (internal/router) both need the
// same checks, and the router may not import the server (it would import the engine). It
// imports the standard library only.
//
// Shapes:
//   - Server(ServerFiles): a listener's config. With ClientCA set it is mutual TLS: every
//     client must present a certificate signed by that CA (tls.RequireAndVerifyClientCert),
//     which is how replicas admit only their router.
//   - Client(ClientFiles): the router's side. CA replaces the system roots for the replicas'
//     certificates; Cert and Key are its client certificate for replicas that require one.
//
// Both set TLS 1.2 as the minimum version (every client Stockpot targets speaks 1.3; 1.2 is
// the floor of current guidance, RFC 9325) and leave cipher suites to crypto/tls.
package tlsconfig
