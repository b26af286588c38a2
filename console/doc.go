// Package console is the webhook gateway's console: an admin API (/api/v1,
// described by the OpenAPI document it serves at /api/openapi.json) and a
// server-rendered web page, on a listener of its own (config.Console; off
// unless console.listen is set).
//
// It answers "why did my endpoint not get event X?" from the relay's own
// data: the endpoints of the webhook sinks with their state, health and lag
// (gateway.Metrics.Stats, what /endpoints serves), their delivery attempts
// (package attempts), and the dead letters (package deadletter). It writes
// the endpoints table through gateway.TableAdmin (the rules the relay reads
// rows by hold), and resends an event or recovers an endpoint since a time
// through a replay job (package replay) that the running relay runs.
//
// Who may do what: a request carries a bearer token (config.ConsoleToken,
// kept hashed), a signed tenant link, or a browser session made from a
// token (a signed, HttpOnly, SameSite=Strict cookie bound to the token's
// hash, whose writes need the session's CSRF token). SetTokens replaces
// the tokens while the server runs (the relay calls it on SIGHUP); a token
// removed or given another hash ends its sessions. An operator token sees
// everything; a tenant token or link sees and changes only the endpoints
// whose tenant column is its tenant, and the attempts and dead letters
// stored as its own (the tenant their endpoint had then, whoever has it
// now: a deleted endpoint's stay its old tenant's): anything else is
// answered 404, as if it did not exist. A record is never sent to an
// endpoint of another tenant than its own, whoever asks. A tenant names
// its endpoints in a namespace of its own (names.go): the row id is made
// from the tenant and the name, so no answer to a create tells of another
// tenant's names or the configuration's. Each token is rate limited; a
// wrong credential is charged to its client's allowance of failures once
// checked, never a right one (limits.go). The API shows endpoint urls with
// their credentials hidden (package redact), except in the answer that
// creates one. Every write is logged as one audit line. Errors are RFC
// 9457 problem documents.
//
// The lists page (paging.go): a limit and an opaque cursor (iterator in a
// request, next in the answer, with done), each page read from its store
// by key from the cursor on with a limit (the endpoints table by its
// primary key, TableAdmin.Page; a tenant's by its tenant too), so that a
// page costs the same whatever the number of rows, and a walk lists every
// row that exists throughout it exactly once.
//
// Concurrency: a Server is safe for concurrent use; Run serves until its
// context ends, then shuts the listener down and waits for it.
package console
