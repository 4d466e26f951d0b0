package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/auth"
	"tidings/internal/testrig/testas"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestPrincipalsDoNotCollide: no value of one claim spells a value of
// another, nor one issuer's subject another's, whatever bytes they hold.
func TestPrincipalsDoNotCollide(t *testing.T) {
	const iss = "https://issuer.example.com"
	for _, pair := range [][2]auth.Info{
		{{Issuer: iss, ClientID: "svc"}, {Issuer: iss, Subject: "client:svc"}},
		{{Issuer: iss, ClientID: "svc"}, {Issuer: iss, Subject: "svc"}},
		{{Issuer: iss, Subject: "alice"}, {Issuer: "https://other.example.com", Subject: "alice"}},
		{{Issuer: iss, Subject: "alice"}, {Issuer: iss + ",5:alice,", Subject: "x"}},
		{{Issuer: "a", Subject: "b,1:c"}, {Issuer: "a,1:b", Subject: "c"}},
		{{Issuer: "", Subject: "x"}, {Issuer: "x", Subject: ""}},
		{{Issuer: iss, Subject: "sub:3:iss,1:x,"}, {Issuer: "iss", Subject: "x"}},
	} {
		a, b := pair[0].Principal(), pair[1].Principal()
		if a == b {
			t.Errorf("%+v and %+v are both %q", pair[0], pair[1], a)
		}
	}
	// The subject names the caller when a token has both claims: a
	// client acting for a user is that user.
	both := auth.Info{Issuer: iss, Subject: "alice", ClientID: "app"}
	if got, want := both.Principal(), (&auth.Info{Issuer: iss, Subject: "alice"}).Principal(); got != want {
		t.Errorf("sub and client_id: %q, want the subject's %q", got, want)
	}
	if got := (&auth.Info{Issuer: iss}).Principal(); got != "" {
		t.Errorf("neither claim: %q, want none", got)
	}
	if got, want := (&auth.Info{Issuer: iss, Subject: "alice"}).Principal(), "sub:26:"+iss+",5:alice,"; got != want {
		t.Errorf("principal %q, want %q", got, want)
	}
}

// FuzzPrincipal: two Infos have the same principal only when they name
// the same claim's value of the same issuer.
func FuzzPrincipal(f *testing.F) {
	f.Add("i", "client:svc", "", "i", "", "svc")
	f.Add("a,1:b", "c", "", "a", "b,1:c", "")
	f.Add("i", "x", "y", "i", "x", "")
	f.Fuzz(func(t *testing.T, iss1, sub1, cid1, iss2, sub2, cid2 string) {
		a := auth.Info{Issuer: iss1, Subject: sub1, ClientID: cid1}
		b := auth.Info{Issuer: iss2, Subject: sub2, ClientID: cid2}
		pa, pb := a.Principal(), b.Principal()
		if pa != pb || pa == "" {
			return
		}
		// Equal principals: the same issuer, and the same value of the
		// claim that names the caller.
		same := iss1 == iss2 && sub1 == sub2 && (sub1 != "" || cid1 == cid2)
		if !same {
			t.Fatalf("%+v and %+v are both %q", a, b, pa)
		}
	})
}

// taskEnv is a server offering tasks behind one Guard per issuer, each at
// a path of its own, as a deployment that trusts two issuers mounts them.
type taskEnv struct {
	ts       *httptest.Server
	issuers  []*testas.Server
	resource []string
}

func newTaskEnv(t *testing.T, issuers int) *taskEnv {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithCapabilities(server.Tasks))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	work := func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done() // runs until the server shuts down
		return nil, ctx.Err()
	}
	if err := srv.AddTool(mcp.Tool{Name: "job", InputSchema: jsontext.Value(`{"type":"object"}`)},
		func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return req.RunAsTask(ctx, work)
		},
	); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(mcp.Tool{Name: "whoami", InputSchema: jsontext.Value(`{"type":"object"}`)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(req.Principal)}}, nil
		}); err != nil {
		t.Fatal(err)
	}
	e := &taskEnv{ts: ts}
	mux := http.NewServeMux()
	h := streamhttp.New(srv, streamhttp.WithPrincipal(auth.Principal))
	for i := range issuers {
		resource := fmt.Sprintf("http://%s/mcp%d", ts.Listener.Addr(), i)
		as := testas.Start(t, resource)
		g, err := auth.New(as.Issuer(), resource)
		if err != nil {
			t.Fatal(err)
		}
		// Mount would claim the root metadata document for each; a
		// server of several resources serves only the path-suffixed ones.
		mux.Handle(fmt.Sprintf("/mcp%d", i), g.Require(h))
		mux.Handle(fmt.Sprintf("/.well-known/oauth-protected-resource/mcp%d", i), g.Metadata())
		e.issuers, e.resource = append(e.issuers, as), append(e.resource, resource)
	}
	ts.Config.Handler = mux
	ts.Start()
	t.Cleanup(ts.Close)
	return e
}

// rpc sends one request with the tasks extension declared to the
// endpoint of issuer i, name going in Mcp-Name, and returns the result
// or the error's message.
func (e *taskEnv) rpc(t *testing.T, i int, token, method, name string, params map[string]any) (result map[string]any, errMsg string) {
	t.Helper()
	p := map[string]any{"_meta": map[string]any{
		mcp.MetaProtocolVersion:    mcp.Version,
		mcp.MetaClientCapabilities: map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}},
	}}
	for k, v := range params {
		p[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.resource[i], strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	req.Header.Set(mcp.HeaderName, name)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", method, resp.StatusCode, b)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for line := range strings.SplitSeq(string(b), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				b = []byte(data)
			}
		}
	}
	var r struct {
		Result map[string]any `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v: %s", method, err, b)
	}
	if r.Error != nil {
		return nil, r.Error.Message
	}
	return r.Result, ""
}

// createTask starts the job as a task and returns its id.
func (e *taskEnv) createTask(t *testing.T, i int, token string) string {
	t.Helper()
	res, msg := e.rpc(t, i, token, mcp.MethodToolsCall, "job", map[string]any{"name": "job", "arguments": map[string]any{}})
	id, _ := res["taskId"].(string)
	if msg != "" || id == "" {
		t.Fatalf("tools/call job: %v %s", res, msg)
	}
	return id
}

// whoami is the principal the server sees for token.
func (e *taskEnv) whoami(t *testing.T, i int, token string) string {
	t.Helper()
	res, msg := e.rpc(t, i, token, mcp.MethodToolsCall, "whoami", map[string]any{"name": "whoami", "arguments": map[string]any{}})
	if msg != "" {
		t.Fatalf("whoami: %s", msg)
	}
	content, _ := res["content"].([]any)
	if len(content) != 1 {
		t.Fatalf("whoami: %v", res)
	}
	text, _ := content[0].(map[string]any)["text"].(string)
	return text
}

// wantHidden checks that token cannot read, update or cancel task id.
func (e *taskEnv) wantHidden(t *testing.T, i int, token, id string) {
	t.Helper()
	for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
		if res, msg := e.rpc(t, i, token, m, id, map[string]any{"taskId": id, "inputResponses": map[string]any{}}); msg != "Failed to retrieve task: Task not found" {
			t.Errorf("%s of another's task: %v %q, want the unknown task's error", m, res, msg)
		}
	}
}

// TestUserCannotPassForAClient: a user token whose sub is "client:svc"
// is not the client svc of a client-credentials token: it cannot read,
// update or cancel the client's task, while the client can.
func TestUserCannotPassForAClient(t *testing.T) {
	e := newTaskEnv(t, 1)
	as := e.issuers[0]
	kid, key := as.SigningKey()
	now := time.Now()
	token := func(claim, value string) string {
		return mint(t, jose.RS256, key, kid, map[string]any{
			"iss": as.Issuer(), claim: value, "aud": []string{e.resource[0]},
			"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(),
		})
	}
	client, user := token("client_id", "svc"), token("sub", "client:svc")
	pc, pu := e.whoami(t, 0, client), e.whoami(t, 0, user)
	if pc == pu {
		t.Fatalf("the client and the user are both %q", pc)
	}
	if again := e.whoami(t, 0, token("client_id", "svc")); again != pc {
		t.Errorf("another token of the client is %q, the first %q", again, pc)
	}
	id := e.createTask(t, 0, client)
	e.wantHidden(t, 0, user, id)
	if res, msg := e.rpc(t, 0, client, mcp.MethodTasksGet, id, map[string]any{"taskId": id}); msg != "" || res["status"] != string(mcp.TaskWorking) {
		t.Errorf("the client's own tasks/get: %v %q", res, msg)
	}
}

// TestIssuersAreApart: two issuers trusted by one server (a Guard each)
// both issue tokens to a caller of the same sub; each is a principal of
// its own, and neither reaches the other's task.
func TestIssuersAreApart(t *testing.T) {
	e := newTaskEnv(t, 2)
	a, b := e.issuers[0].Token(t), e.issuers[1].Token(t)
	pa, pb := e.whoami(t, 0, a), e.whoami(t, 1, b)
	if pa == pb {
		t.Fatalf("the same sub of two issuers is one principal %q", pa)
	}
	if again := e.whoami(t, 0, a); again != pa {
		t.Errorf("the same token is %q, then %q", pa, again)
	}
	id := e.createTask(t, 0, a)
	e.wantHidden(t, 1, b, id)
	if _, msg := e.rpc(t, 0, a, mcp.MethodTasksGet, id, map[string]any{"taskId": id}); msg != "" {
		t.Errorf("the owner's tasks/get: %q", msg)
	}
}
