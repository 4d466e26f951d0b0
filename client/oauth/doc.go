// Package oauth is the client side of MCP authorization (revision
// 2026-07-28): OAuth 2.1 for HTTP MCP servers that answer 401.
//
// A [Flow] is a [tidings/client.Authorizer]: given to a client with
// client.WithAuthorizer, [Flow.Authorize] puts a token on each request
// and [Flow.Challenge] answers the server's challenges. The first 401
// starts the flow:
//
//   - Protected Resource Metadata (RFC 9728) from the challenge's
//     resource_metadata, else the path-inserted well-known URI, else the
//     root one; a document naming another resource is refused.
//   - Authorization server metadata (RFC 8414 and OpenID Connect
//     Discovery, path-inserted and appended as the MCP specification
//     orders them); a document whose issuer is not the one it was
//     fetched for is never used.
//   - A client identity per authorization server: pre-registered
//     credentials, which belong to the one authorization server
//     Config.ClientIssuer names and go to no other, else a Client ID
//     Metadata Document URL where the
//     server accepts them, else dynamic registration (RFC 7591), kept in
//     the [Store] per issuer. When a server's metadata moves it to
//     another authorization server, the flow identifies itself there
//     anew and never presents the old server's client ID.
//   - The authorization code grant through an [Interaction], with PKCE
//     S256 (refused when the server does not advertise it), state, the
//     resource indicator (RFC 8707) in the authorization and token
//     requests, and the RFC 9207 iss check, by exact string comparison,
//     before the code goes anywhere.
//   - Scopes: the challenge's, else the metadata's scopes_supported,
//     else none; offline_access when the authorization server lists it.
//
// After that it refreshes tokens when they expire or the server answers
// 401, falling back to a new authorization when the authorization server
// refuses the refresh token (invalid_grant, invalid_client,
// unauthorized_client); a refresh that fails otherwise, on a network
// error say, is returned as an error and the session kept for the next
// try. On insufficient_scope it re-authorizes with the union of the
// scopes it asked for and the challenge's, once per scope set and a few
// times per operation (Config.MaxStepUps). An authorization runs in a
// goroutine of the Flow's, detached from the request that started it and
// bounded by Config.AuthorizeTimeout; [Flow.Close] ends it.
//
// Other grants replace the authorization code grant through Config.Grant:
// [ClientCredentials] (client_secret_basic or private_key_jwt),
// [JWTBearer] (workload identity federation) and [IdentityAssertion]
// (enterprise-managed authorization: token exchange at the identity
// provider, then the JWT bearer grant). [Flow.Exchange] serves a party
// that speaks for callers of its own, such as a gateway: it trades a
// caller's access token for one issued for another audience (RFC 8693),
// at the client's own authorization server. With Config.DPoP the tokens are
// DPoP-bound (RFC 9449) where the authorization server supports it: a
// proof goes with every token and resource request, and the servers'
// nonces are taken up.
//
// Tokens, refresh tokens, client secrets, authorization codes and PKCE
// verifiers never appear in the flow's log or in its errors.
//
// # What is built on golang.org/x/oauth2, and what is not
//
// x/oauth2 builds the authorization URL (with its PKCE S256 options),
// redeems the code, refreshes tokens and runs the client credentials
// grant, with the client authentication styles client_secret_basic,
// client_secret_post and none. Every token request, whoever builds it,
// goes through one hook of this package (an http.RoundTripper) that adds
// what x/oauth2 has no option for — the resource indicator on a refresh,
// private_key_jwt client assertions, DPoP proofs and the retry on a
// use_dpop_nonce — and refuses redirects. This package's own code does
// the rest: the WWW-Authenticate parser ([ParseChallenges]), both
// discoveries and their checks, dynamic registration, the RFC 9207 iss
// check, the challenge handling (refresh, step-up, migration, limits),
// the JWT bearer and token exchange requests, and DPoP proofs (signed
// with go-jose).
package oauth
