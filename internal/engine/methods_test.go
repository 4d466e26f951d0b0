package engine

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// schemaRequests returns the methods of the requests a schema defines:
// every definition with a constant method and an id.
func schemaRequests(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Const any `json:"const"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]bool{}
	for _, d := range doc.Defs {
		m, ok := d.Properties["method"]
		name, isName := m.Const.(string)
		if _, hasID := d.Properties["id"]; ok && hasID && isName {
			out[name] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no request methods found", path)
	}
	return out
}

// TestTableCoversSchemas holds the method table to both schemas: every
// request method of an era is in the table with that era, or is listed
// here as deliberately absent from it, and every method the table gives
// an era is in that era's schema or is the tasks extension's.
func TestTableCoversSchemas(t *testing.T) {
	// Requests the server never serves in that era, and why.
	absent := map[Eras]map[string]string{
		Modern: {},
		Legacy: {
			// Requests a server sends, not serves: a client's input.
			mcp.MethodElicit:        "server-to-client",
			mcp.MethodCreateMessage: "server-to-client",
			mcp.MethodRootsList:     "server-to-client",
			// The 2025-11-25 core tasks: a session of that era never
			// gets a task, so it has none to ask after.
			mcp.MethodTasksGet:    "no tasks in 2025-11-25 sessions",
			mcp.MethodTasksCancel: "no tasks in 2025-11-25 sessions",
			"tasks/list":          "no tasks in 2025-11-25 sessions",
			"tasks/result":        "no tasks in 2025-11-25 sessions",
		},
	}
	// Methods of the table no schema defines: the tasks extension's.
	extension := []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel}
	schemas := map[Eras]string{
		Modern: "../../testdata/schema-2026-07-28.json",
		Legacy: "../../testdata/schema-2025-11-25.json",
	}
	for era, path := range schemas {
		want := schemaRequests(t, path)
		for _, name := range slices.Sorted(maps.Keys(want)) {
			m, ok := Lookup(name)
			_, skip := absent[era][name]
			switch {
			case skip && ok && m.Eras.Has(era):
				t.Errorf("%s: %s is listed as absent from this era but the table gives it the era", path, name)
			case !skip && !ok:
				t.Errorf("%s: request %s is not in the method table", path, name)
			case !skip && !m.Eras.Has(era):
				t.Errorf("%s: request %s is in the table without this era (eras %b)", path, name, m.Eras)
			}
		}
		for _, m := range Methods() {
			if m.Notification || !m.Eras.Has(era) || want[m.Name] {
				continue
			}
			if era == Modern && slices.Contains(extension, m.Name) {
				continue
			}
			t.Errorf("%s: the table gives %s this era, which the schema does not define", path, m.Name)
		}
	}
}

// TestTableIsConsistent checks what the server and transports rely on:
// names are unique, every method has an era, every request has a
// handler, and a method that mirrors a param in Mcp-Name reads it.
func TestTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	from := map[NameFrom]string{FromName: "name", FromURI: "uri", FromTaskID: "taskId"}
	for _, m := range Methods() {
		if seen[m.Name] {
			t.Errorf("%s is in the table twice", m.Name)
		}
		seen[m.Name] = true
		if m.Eras == 0 {
			t.Errorf("%s has no era", m.Name)
		}
		if !m.Notification && m.Handler == NoHandler {
			t.Errorf("request %s has no handler", m.Name)
		}
		if p, ok := from[m.MCPName]; ok && !slices.Contains(m.Params, p) {
			t.Errorf("%s mirrors %s in Mcp-Name but does not read it", m.Name, p)
		}
		if m.AsksInput && !(slices.Contains(m.Params, "inputResponses") && slices.Contains(m.Params, "requestState")) {
			t.Errorf("%s may ask for input but does not read the answers", m.Name)
		}
		if m.Handler.Core() != (m.Handler > NoHandler && m.Handler < NumCoreHandlers) {
			t.Errorf("%s: Core disagrees with the handler's key", m.Name)
		}
	}
}

// TestParseReadsTheTable checks that Parse decodes the members the
// table names for the method and no other, and that Mcp-Name comes from
// the member the table says.
func TestParseReadsTheTable(t *testing.T) {
	cases := []struct {
		method, params string
		name           string
		named          bool
	}{
		{mcp.MethodToolsCall, `{"name":"echo","uri":7}`, "echo", true},
		{mcp.MethodResourcesRead, `{"uri":"file:///a","name":7}`, "file:///a", true},
		{mcp.MethodTasksGet, `{"taskId":"t1","uri":7}`, "t1", true},
		{mcp.MethodTasksUpdate, `{}`, "", true},
		{mcp.MethodToolsList, `{"cursor":"c","name":7}`, "", false},
		{"no/such", `{"name":7}`, "", false},
	}
	for _, tc := range cases {
		c, rep := Parse(&jsonrpc.Message{ID: jsonrpc.IntID(1), Method: tc.method, Params: []byte(tc.params)})
		if rep != nil {
			t.Fatalf("%s: Parse refused %s", tc.method, rep.Body)
		}
		if c.ParamErr != nil {
			t.Errorf("%s: a member the method does not read failed the call: %v", tc.method, c.ParamErr)
		}
		if name, named := c.NameParam(); name != tc.name || named != tc.named {
			t.Errorf("%s: NameParam = %q, %v; want %q, %v", tc.method, name, named, tc.name, tc.named)
		}
	}
}

// TestEra checks the one rule that decides a request's era on every
// transport: the version it declares, in _meta or beside the body, wins.
func TestEra(t *testing.T) {
	cases := []struct {
		params, declared string
		want             Eras
	}{
		{`{}`, "", Legacy},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "", Modern},
		{`{}`, mcp.Version, Modern},
		{`{}`, mcp.LegacyVersion, Legacy},
		{`{}`, "2099-01-01", Modern},
		// A _meta that is otherwise malformed still declares its version.
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":7}}`, "", Modern},
		{`[1]`, "", Legacy},
	}
	for _, tc := range cases {
		c, _ := Parse(&jsonrpc.Message{ID: jsonrpc.IntID(1), Method: mcp.MethodToolsList, Params: []byte(tc.params)})
		if got := c.Era(tc.declared); got != tc.want {
			t.Errorf("Era(%s, declared %q) = %b, want %b", tc.params, tc.declared, got, tc.want)
		}
	}
}
