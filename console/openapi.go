package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/paging"
)

// obj is a JSON object of the OpenAPI document.
type obj = map[string]any

func str(desc string) obj             { return obj{"type": "string", "description": desc} }
func typed(t, desc string) obj        { return obj{"type": t, "description": desc} }
func ref(name string) obj             { return obj{"$ref": "#/components/schemas/" + name} }
func arrayOf(items obj, d string) obj { return obj{"type": "array", "items": items, "description": d} }
func object(props obj, required ...string) obj {
	o := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// schemas are the document's components.schemas.
var schemas = obj{
	"Problem": object(obj{
		"type": str("a URI reference naming the kind of problem"), "title": str("the HTTP status's text"),
		"status": typed("integer", "the HTTP status"), "detail": str("what went wrong and how to fix it"),
	}, "type", "title", "status"),
	"SinkList": object(obj{"sinks": arrayOf(ref("Sink"), "the webhook sinks")}, "sinks"),
	"Sink": object(obj{
		"name": str("the sink's name"), "endpoints": typed("integer", "its endpoints this token may see"),
		"states":  obj{"type": "object", "additionalProperties": obj{"type": "integer"}, "description": "endpoints by state"},
		"failing": typed("integer", "endpoints in a run of failed attempts"), "lag_seconds": typed("number", "the greatest lag of its endpoints"),
		"endpoints_table": typed("boolean", "it has an endpoints table (endpoints can be managed here)"),
	}, "name", "endpoints", "states"),
	"EndpointList": object(obj{"endpoints": arrayOf(ref("Endpoint"), "the page's endpoints"), "next": str("the iterator of the next page (absent: this was the last)"), "done": typed("boolean", "true: this was the last page")}, "endpoints", "done"),
	"Endpoint": object(obj{
		"sink": str("the webhook sink"), "name": str("its name: for a tenant token the tenant's own name of it (unique among the tenant's endpoints), else its row id"), "key": str("sink/id: its checkpoint's and metrics' name"),
		"static": typed("boolean", "an endpoint of the configuration, not of the endpoints table (read only here)"),
		"id":     str("the table row's id: for an endpoint a tenant made, t, 16 hex digits of its tenant's namespace, '.', and its name; attempts and dead letters name the endpoint by it"), "url": str("the row's url, its credentials and query values hidden (xxxxx) except in the create's answer; empty for a static endpoint"),
		"tenant": str("the row's tenant"), "event_types": arrayOf(obj{"type": "string"}, "event type globs"),
		"aggregate_types": arrayOf(obj{"type": "string"}, "aggregate type globs"), "rate_limit": typed("number", "attempts per second"),
		"enabled": typed("boolean", "the row's enabled column"), "secrets": typed("integer", "how many signing secrets the row holds"),
		"invalid": str("why the row cannot be used"),
		"state":   str("attached, waiting, catching_up, disabled, off, invalid, stopped, or unknown"),
		"health":  str("failing during a run of failed attempts, else ok"),
		"stats":   obj{"type": "object", "description": "the gateway's figures of the endpoint, as /endpoints on the metrics listener serves them"},
	}, "sink", "name", "key", "static", "state", "health"),
	"EndpointWrite": object(obj{
		"id": str("create: the endpoint's name: an operator's is the row's id (1 to 64 letters, digits, '.', '_', '-'); a tenant's is its name among its own endpoints (1 to 46 of them), the row's id is made from it and the tenant"), "url": str("the https address receiving the POSTs (an update that sends the url back as it was shown, hidden parts and all, keeps them)"),
		"tenant": str("the tenant (a tenant token: its own, or left out)"), "event_types": arrayOf(obj{"type": "string"}, "event type globs"),
		"aggregate_types": arrayOf(obj{"type": "string"}, "aggregate type globs"), "rate_limit": typed("number", "attempts per second"),
		"enabled": typed("boolean", "create: enabled at once (default true)"), "secret": str("create: a whsec_ secret to sign with (default: a new one)"),
	}, "url"),
	"EndpointSecret": object(obj{"endpoint": ref("Endpoint"), "secret": str("the signing secret, shown this once")}, "secret"),
	"Rotate":         object(obj{"keep_old": typed("boolean", "keep the old secrets too while receivers switch")}),
	"Recover":        object(obj{"since": str("a time (RFC 3339) or a duration ago (2h)")}, "since"),
	"Job":            object(obj{"job": str("the replay job's id (outbox-relay replay list shows it)")}, "job"),
	"AttemptList":    object(obj{"attempts": arrayOf(ref("Attempt"), "the page's attempts, newest first"), "next": str("the iterator of the next page (absent: this was the last)"), "done": typed("boolean", "true: this was the last page")}, "attempts", "done"),
	"Attempt": object(obj{
		"id": typed("integer", "the record's id"), "time": str("when the attempt started"), "sink": str("the webhook sink"),
		"endpoint": str("the endpoint's name"), "tenant": str("the endpoint's tenant"), "event_id": str("the event"), "event_type": str("its type"),
		"attempt": typed("integer", "1 for the first attempt of the event at the endpoint"), "status": typed("integer", "the HTTP status (absent: no answer)"),
		"error_class": str("connection, timeout, tls, egress or request, when no answer came"), "error": str("the error, secrets hidden"),
		"outcome": str("delivered, retry or failed"), "duration_ns": typed("integer", "how long it took"),
		"answer": str("the first bytes of the answer, base64"), "replay": str("the replay job that sent it"),
		"committed": str("the event's commit time"), "gtid": str("its transaction's GTID"),
	}, "id", "time", "sink", "endpoint", "event_id", "attempt", "outcome"),
	"DeadLetterList": object(obj{"dead_letters": arrayOf(ref("DeadLetter"), "the page's dead letters, oldest first"), "next": str("the iterator of the next page (absent: this was the last)"), "done": typed("boolean", "true: this was the last page")}, "dead_letters", "done"),
	"DeadLetter": object(obj{
		"id": str("the record's id"), "sink": str("sink/endpoint"), "tenant": str("the endpoint's tenant when the event failed: the record stays that tenant's"), "event": obj{"type": "object", "description": "the event"},
		"reason": str("why it was dead-lettered"), "attempts": typed("integer", "attempts made"),
		"first_failed": str("time"), "last_failed": str("time"), "stored": str("time"),
	}, "id", "sink", "reason"),
	"LinkRequest":            object(obj{"tenant": str("the tenant whose view the link opens"), "ttl": str("how long it is valid: a duration, default 15m, at most 24h")}, "tenant"),
	"Link":                   object(obj{"path": str("the path of the tenant's view (/t/LINK/), to join to the console's address"), "expires": str("when it stops working")}, "path", "expires"),
	"DeadLetterReplay":       object(obj{"ids": arrayOf(obj{"type": "string"}, "the records to replay")}, "ids"),
	"DeadLetterPurge":        object(obj{"ids": arrayOf(obj{"type": "string"}, "the records to delete")}, "ids"),
	"DeadLetterPurgeResult":  object(obj{"purged": typed("integer", "records deleted")}, "purged"),
	"DeadLetterReplayResult": object(obj{"replayed": typed("integer", "delivered and removed"), "failed": typed("integer", "kept"), "error": str("why those failed")}, "replayed", "failed"),
}

var pathParamRe = regexp.MustCompile(`\{([a-z_]+)\}`)

// pathParams describes the path parameters.
var pathParams = map[string]string{
	"sink":     "the webhook sink's name",
	"endpoint": "the endpoint's name (a tenant token's own name of it), or its id",
	"id":       "the attempt's id",
}

// openAPI builds the document from apiRoutes and schemas.
func openAPI() obj {
	paths := obj{}
	for _, rt := range apiRoutes {
		op := obj{"operationId": rt.id, "summary": rt.summary, "tags": []string{strings.Split(strings.TrimPrefix(rt.path, "/api/v1/"), "/")[0]}}
		var params []obj
		for _, m := range pathParamRe.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, obj{"name": m[1], "in": "path", "required": true, "description": pathParams[m[1]], "schema": obj{"type": "string"}})
		}
		for _, q := range rt.query {
			params = append(params, obj{"name": q[0], "in": "query", "description": q[1], "schema": obj{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.body != "" {
			op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": ref(rt.body)}}}
		}
		ok := obj{"description": http.StatusText(rt.status)}
		if rt.resp != "" {
			ok["content"] = obj{"application/json": obj{"schema": ref(rt.resp)}}
		}
		responses := obj{fmt.Sprint(rt.status): ok}
		problems := []int{400, 401, 404, 429}
		if rt.write {
			problems = append(problems, 403, 409, 422)
		}
		for _, st := range problems {
			responses[fmt.Sprint(st)] = obj{"$ref": "#/components/responses/Problem" + fmt.Sprint(st)}
		}
		op["responses"] = responses
		item, _ := paths[rt.path].(obj)
		if item == nil {
			item = obj{}
			paths[rt.path] = item
		}
		item[strings.ToLower(rt.method)] = op
	}
	responses := obj{}
	for _, st := range []int{400, 401, 403, 404, 409, 422, 429} {
		responses["Problem"+fmt.Sprint(st)] = obj{"description": http.StatusText(st) + " (RFC 9457 problem)",
			"content": obj{"application/problem+json": obj{"schema": ref("Problem")}}}
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "outbox-relay console API", "version": "1",
			"description": "The webhook gateway's admin API: endpoints, delivery attempts, resends, recoveries and dead letters. Authenticate with \"Authorization: Bearer TOKEN\" (console.tokens) or a tenant link. A tenant token sees only its tenant's endpoints, attempts and dead letters. Errors are RFC 9457 problem documents; requests are rate limited per token (429 with Retry-After)."},
		"paths":      paths,
		"components": obj{"schemas": schemas, "responses": responses, "securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}}},
		"security":   []obj{{"bearer": []string{}}},
	}
}

var openAPIOnce = sync.OnceValue(func() []byte {
	b, err := json.MarshalIndent(openAPI(), "", "  ")
	if err != nil {
		panic(err)
	}
	return b
})

// openAPIJSON is the document, as served.
func openAPIJSON() []byte { return openAPIOnce() }

// endpointNames is the reference's section on how endpoints are named.
const endpointNames = `## Endpoint names and ids

Each tenant names its endpoints in a namespace of its own: two tenants can both have an endpoint
named ` + "`orders`" + `, and what a tenant's create answers depends on its own endpoints only, never
on another tenant's nor on the configuration's (there is no way to learn that a name is taken
elsewhere).

- A tenant token (or link) creates an endpoint with ` + "`id`" + ` set to the name it chooses (1 to 46
  letters, digits, '.', '_', '-'). The relay stores it as the row id ` + "`t<16 hex digits>.<name>`" + `:
  the hex digits are the first 8 bytes of a SHA-256 of the tenant (lower-case hex, so no
  collation, case or accent insensitive, takes one tenant's namespace for another's). So a
  tenant's name collides neither with another tenant's row nor, folded, with an endpoint of the
  configuration.
- The answers show the tenant's name as ` + "`name`" + ` and the row id as ` + "`id`" + `; ` + "`key`" + ` (sink/id) is
  the endpoint's checkpoint and metrics name. Attempts and dead letters name an endpoint by its id
  (` + "`GET /api/v1/attempts?endpoint=ID`" + `). The endpoint routes take either the name or the id.
- A name taken by the tenant's own endpoint is ` + "`409`" + ` (its endpoints table's collation decides:
  ` + "`ORDERS`" + ` beside its own ` + "`orders`" + ` collides when the collation ignores case). A name
  that is not valid is ` + "`422`" + `, by the name's own rules.
- Rows made before namespaces, whose id is the name, keep their id; the tenant whose tenant
  column they carry reaches them by it, as before.
- An operator token names rows as it likes, with one rule: an id of the form ` + "`t<16 hex>.`" + `
  belongs to the tenant whose namespace it is (the console refuses such a row for another
  tenant, ` + "`422`" + `). A row written with SQL that breaks the rule would make that tenant's create of
  the name answer ` + "`409`" + `.

`

// pagingSection is the reference's section on how the lists page.
var pagingSection = fmt.Sprintf(`## Pages

The lists (endpoints, attempts, dead letters) answer one page at a time, as Svix's API does:
`+"`limit`"+` rows at most (default %d, at most %d), `+"`done`"+` (true on the last page) and, while the
list goes on, `+"`next`"+`: pass it back as `+"`iterator`"+` (with the same filters) for the next page.
An iterator is opaque (the key of the last row the page examined); one that is not a list's own
is answered `+"`400`"+`.

- Each page is read from its store by key from the iterator on, with a limit (the endpoints
  table by its primary key, `+"`WHERE id > ? ORDER BY id LIMIT n`"+`; attempts and dead letters by
  their ids), so a page costs the same whatever the number of rows.
- A walk is complete and stable: a row that exists from the first page to the last is on exactly
  one page, whatever is added or deleted meanwhile. A row added during the walk may or may not
  appear (the endpoints and dead letters: when its key is after the page read; attempts, newest
  first: never).
- A tenant's page reads only its own rows (`+"`tenant = ?`"+`, with an index on (tenant, id): the
  endpoints table of deploy/outbox_endpoints.sql has one, and `+"`outbox-relay check`"+` warns
  when a table made before lacks it). An operator filters by `+"`tenant`"+`.
- With `+"`state`"+` (endpoints), which only the running relay knows, a page examines at most
  %d times its limit rows: it may hold fewer than `+"`limit`"+` rows, even none, and still have a
  `+"`next`"+`. Follow `+"`next`"+` until `+"`done`"+`.

`, DefaultPageLimit, MaxPageLimit, paging.ScanFactor)

// Reference renders the API reference (docs/console-api.md) from the
// OpenAPI document.
func Reference() string {
	doc := openAPI()
	var b strings.Builder
	b.WriteString("# Console API reference\n\n<!-- generated from the OpenAPI document by `go test ./console/ -run APIReference -update`; do not edit -->\n\n")
	b.WriteString(doc["info"].(obj)["description"].(string) + "\n\n")
	b.WriteString("The running console serves this document at `/api/openapi.json` (OpenAPI 3.1). See [console.md](console.md) for tokens, links and the page.\n\n")
	b.WriteString(endpointNames)
	b.WriteString(pagingSection)
	b.WriteString("| method | path | what it does | success |\n|---|---|---|---|\n")
	for _, rt := range apiRoutes {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %d |\n", rt.method, rt.path, rt.summary, rt.status)
	}
	for _, rt := range apiRoutes {
		fmt.Fprintf(&b, "\n## %s %s\n\n%s\n", rt.method, rt.path, rt.summary)
		if len(rt.query) > 0 {
			b.WriteString("\nQuery parameters:\n\n")
			for _, q := range rt.query {
				fmt.Fprintf(&b, "- `%s`: %s\n", q[0], q[1])
			}
		}
		if rt.body != "" {
			fmt.Fprintf(&b, "\nBody: [`%s`](#%s).\n", rt.body, strings.ToLower(rt.body))
		}
		if rt.resp != "" {
			fmt.Fprintf(&b, "\nAnswer: %d, [`%s`](#%s).\n", rt.status, rt.resp, strings.ToLower(rt.resp))
		} else {
			fmt.Fprintf(&b, "\nAnswer: %d, no body.\n", rt.status)
		}
	}
	b.WriteString("\n## Schemas\n")
	for _, n := range slices.Sorted(maps.Keys(schemas)) {
		sc := schemas[n].(obj)
		fmt.Fprintf(&b, "\n### %s\n\n| field | type | what it is |\n|---|---|---|\n", n)
		props := sc["properties"].(obj)
		for _, k := range slices.Sorted(maps.Keys(props)) {
			p := props[k].(obj)
			t, _ := p["type"].(string)
			if r, ok := p["$ref"].(string); ok {
				t = strings.TrimPrefix(r, "#/components/schemas/")
			}
			if it, ok := p["items"].(obj); ok {
				if r, ok := it["$ref"].(string); ok {
					t = "array of " + strings.TrimPrefix(r, "#/components/schemas/")
				} else {
					t = "array of " + it["type"].(string)
				}
			}
			d, _ := p["description"].(string)
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k, t, d)
		}
	}
	return b.String()
}
