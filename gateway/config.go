package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"tidings/client"
)

// Config is what a gateway serves, as its YAML file says it:
//
//	upstreams:
//	  - id: files
//	    url: http://127.0.0.1:9001/mcp
//	  - id: weather
//	    command: [./weather-server, --stdio]
//	    prefix: ""            # keep its names as they are
//	    exclude: ["debug_*"]  # by the upstream's own names
//	    auth:
//	      bearer_file: /run/secrets/weather
//	  - id: mail              # each caller's own token, exchanged for one for mail
//	    url: https://mail.example.com/mcp
//	    auth:
//	      token_exchange: {issuer: https://as.example.com, client_id: gw, client_secret_file: /run/secrets/gw}
//	callers:
//	  - scope: admin          # callers with this scope see everything
//	  - upstreams: [files]    # everyone else sees only these
//	max_ttl: 1m
//
// Every member is checked when the file is read: an unknown one is an
// error, not ignored, so that a misspelt limit is never silently off.
type Config struct {
	// Upstreams are the servers behind the gateway, in the order their
	// items come in merged lists when names tie.
	Upstreams []Upstream `yaml:"upstreams"`
	// Callers are rules that choose what each caller sees, tried in
	// order; the first that matches applies. With none, every caller
	// sees everything. A caller no rule matches sees nothing. Behind
	// an auth.Guard, name callers with Principal (see there).
	Callers []CallerRule `yaml:"callers"`
	// MaxTTL caps the ttlMs the gateway tells and how long it keeps an
	// upstream's answer (default 5m).
	MaxTTL Duration `yaml:"max_ttl"`
	// PageSize is how many items a page of a merged list holds (default 100).
	PageSize int `yaml:"page_size"`
	// MaxItems bounds what the gateway keeps of one upstream's list
	// (default 10000): an upstream that offers more has the rest left
	// out, logged and counted (tidings_gateway_lists_cut_total).
	MaxItems int `yaml:"max_items"`
	// MaxExchangedTokens bounds the tokens obtained by token exchange
	// that the gateway keeps for one upstream, over all its callers
	// (default 10000): past it the least recently used is dropped, and
	// counted (tidings_gateway_exchanged_tokens_evicted_total).
	MaxExchangedTokens int `yaml:"max_exchanged_tokens"`
	// MaxKeptBytes bounds the bytes of the resources/read answers the
	// gateway keeps, over all upstreams (default 64 MiB): past it, older
	// answers make room, counted
	// (tidings_gateway_kept_reads_evicted_total), and an answer over an
	// eighth of it is not kept.
	MaxKeptBytes int64 `yaml:"max_kept_bytes"`
}

// Upstream is one server behind the gateway.
type Upstream struct {
	// ID names the upstream in metrics, logs and the default prefix:
	// lower-case letters, digits and '-', up to 32 bytes.
	ID string `yaml:"id"`
	// URL is a Streamable HTTP endpoint; Command a stdio server to start
	// (its argv). Exactly one is set.
	URL     string   `yaml:"url"`
	Command []string `yaml:"command"`
	// Prefix goes before the names of the upstream's tools and prompts.
	// Unset, it is the ID and "_" (which no ID holds, so prefixed names
	// of two upstreams never meet); "" keeps names as they are, and two
	// upstreams offering one name is then an error.
	Prefix *string `yaml:"prefix"`
	// Include and Exclude filter the upstream's items by their own names
	// (tools, prompts) or URIs (resources, templates), with path.Match
	// globs: with Include, only what matches one is kept; what matches an
	// Exclude is left out.
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
	// Auth is the credential the gateway presents upstream: never the
	// caller's own.
	Auth Auth `yaml:"auth"`
	// Protocol pins the revision spoken with the upstream ("" negotiates).
	Protocol string `yaml:"protocol"`
}

// Auth is how the gateway authenticates to one upstream. At most one
// way is set; none sends no credential.
type Auth struct {
	// BearerFile holds a token sent as "Authorization: Bearer <token>".
	BearerFile string `yaml:"bearer_file"`
	// Header and HeaderFile send a header of that name, its value read
	// from the file (an API key, say).
	Header     string `yaml:"header"`
	HeaderFile string `yaml:"header_file"`
	// ClientCredentials has the gateway obtain its own access tokens by
	// the OAuth client credentials grant, when the upstream's 401
	// challenge asks for one, and renew them.
	ClientCredentials *ClientCredentials `yaml:"client_credentials"`
	// TokenExchange has the gateway present, for each caller, a token
	// the authorization server issues in the caller's name for this
	// upstream, in exchange for the caller's own (RFC 8693): the upstream
	// then knows who calls, and still never sees the token the caller
	// gave the gateway. Every answer of such an upstream is then kept
	// per caller, and its changes are heard on one listen per caller.
	TokenExchange *TokenExchange `yaml:"token_exchange"`
}

// TokenExchange is where and how the gateway exchanges each caller's
// access token for one to present to an upstream.
type TokenExchange struct {
	// Issuer is the authorization server that exchanges tokens: its
	// token endpoint is found in its metadata, and, like the issuer,
	// must be HTTPS or HTTP on a loopback address.
	Issuer string `yaml:"issuer"`
	// ClientID and SecretFile are the gateway's registration there; the
	// file holds the secret.
	ClientID   string `yaml:"client_id"`
	SecretFile string `yaml:"client_secret_file"`
	// Audience and Resource name the upstream to the authorization
	// server (RFC 8693 audience, RFC 8707 resource). Resource is by
	// default the upstream's URL, and Audience the Resource.
	Audience string `yaml:"audience"`
	Resource string `yaml:"resource"`
	// Scopes are asked for; none leaves them to the authorization server.
	Scopes []string `yaml:"scopes"`
}

// ClientCredentials are the gateway's own credentials at the
// authorization server an upstream trusts.
type ClientCredentials struct {
	// Issuer is the authorization server the client is registered with:
	// the secret goes to no other, whatever an upstream names.
	Issuer string `yaml:"issuer"`
	// ClientID and SecretFile are the client's registration; the file
	// holds the secret.
	ClientID   string `yaml:"client_id"`
	SecretFile string `yaml:"client_secret_file"`
	// Scopes are asked for besides those the upstream names.
	Scopes []string `yaml:"scopes"`
}

// CallerRule says what the callers it matches see. A rule with neither
// Scope nor Subject matches everyone.
type CallerRule struct {
	// Scope matches callers whose token grants this scope.
	Scope string `yaml:"scope"`
	// Subject matches the caller whose token's sub is this.
	Subject string `yaml:"subject"`
	// Upstreams are the upstreams the caller sees (by ID); empty: all.
	Upstreams []string `yaml:"upstreams"`
	// Exclude hides items by their names as the caller sees them
	// (prefixed), with path.Match globs.
	Exclude []string `yaml:"exclude"`
}

// Duration is a time.Duration written as "30s" or "5m" in the file.
type Duration time.Duration

// UnmarshalYAML reads a duration such as "90s".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d, column %d: %q is not a duration such as 30s or 5m", n.Line, n.Column, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Defaults of the configuration.
const (
	defaultMaxTTL   = 5 * time.Minute
	defaultPageSize = 100
	defaultMaxItems = 10000
	// defaultMaxExchanged bounds the exchanged tokens kept.
	defaultMaxExchanged = 10000
	// defaultMaxKeptBytes bounds the bytes of the reads kept.
	defaultMaxKeptBytes = 64 << 20
	maxIDLen            = 32
	// prefixSeparator ends a default prefix. IDs never hold it.
	prefixSeparator = "_"
)

// LoadConfig reads and checks a configuration file.
func LoadConfig(file string) (Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Config{}, fmt.Errorf("gateway config: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("gateway config %s: %w", file, err)
	}
	return cfg, nil
}

// ParseConfig reads and checks a configuration in YAML. Its errors are
// one line each, and say where in the file the mistake is (line and
// column) when the mistake has a place.
func ParseConfig(b []byte) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Config{}, oneLine(err)
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return Config{}, placeTypeErrors(&doc, te)
		}
		return Config{}, oneLine(err)
	}
	if err := cfg.Check(); err != nil {
		return Config{}, placeCheckError(&doc, err)
	}
	return cfg, nil
}

// oneLine is err with its lines joined: a config error is read in a log
// line or a terminal, where a newline shows as nothing or as garbage.
func oneLine(err error) error {
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

// unknownField is how the YAML decoder words a member no field has.
var unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)

// placeTypeErrors words the decoder's errors for a person: each on its
// line and column, an unknown member named as such.
func placeTypeErrors(doc *yaml.Node, te *yaml.TypeError) error {
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		m := unknownField.FindStringSubmatch(e)
		if m == nil {
			msgs = append(msgs, e)
			continue
		}
		line, _ := strconv.Atoi(m[1])
		where := "line " + m[1]
		if k := findKey(doc, line, m[2]); k != nil {
			where = fmt.Sprintf("line %d, column %d", k.Line, k.Column)
		}
		msgs = append(msgs, fmt.Sprintf("%s: unknown member %q (members are lower case, with '_' between words)", where, m[2]))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// findKey finds the mapping key named name on line in the tree under n.
func findKey(n *yaml.Node, line int, name string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Line == line && k.Value == name {
				return k
			}
		}
	}
	for _, c := range n.Content {
		if k := findKey(c, line, name); k != nil {
			return k
		}
	}
	return nil
}

// checkPlace finds what a Check error is about: "upstream N", "caller
// rule N", or a top-level member it names.
var checkPlace = regexp.MustCompile(`^(?:upstream (\d+) |caller rule (\d+):|([a-z_]+) is )`)

// placeCheckError puts the line and column of what err is about before
// it, when the file has it.
func placeCheckError(doc *yaml.Node, err error) error {
	m := checkPlace.FindStringSubmatch(err.Error())
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if m == nil || root.Kind != yaml.MappingNode {
		return err
	}
	var at *yaml.Node
	member := func(name string) *yaml.Node {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == name {
				return root.Content[i+1]
			}
		}
		return nil
	}
	item := func(list *yaml.Node, n string) *yaml.Node {
		i, _ := strconv.Atoi(n)
		if list == nil || list.Kind != yaml.SequenceNode || i < 1 || i > len(list.Content) {
			return nil
		}
		return list.Content[i-1]
	}
	switch {
	case m[1] != "":
		at = item(member("upstreams"), m[1])
	case m[2] != "":
		at = item(member("callers"), m[2])
	case m[3] != "":
		at = member(m[3])
	}
	if at == nil {
		return err
	}
	return fmt.Errorf("line %d, column %d: %w", at.Line, at.Column, err)
}

// Check reports the first thing wrong with the configuration, in words
// that name the upstream or rule at fault.
func (c *Config) Check() error {
	if len(c.Upstreams) == 0 {
		return errors.New("no upstreams: list at least one under \"upstreams\"")
	}
	if c.PageSize < 0 {
		return fmt.Errorf("page_size is %d; it must be positive", c.PageSize)
	}
	if c.MaxItems < 0 {
		return fmt.Errorf("max_items is %d; it must be positive", c.MaxItems)
	}
	if c.MaxKeptBytes < 0 {
		return fmt.Errorf("max_kept_bytes is %d; it must be positive", c.MaxKeptBytes)
	}
	if c.MaxExchangedTokens < 0 {
		return fmt.Errorf("max_exchanged_tokens is %d; it must be positive", c.MaxExchangedTokens)
	}
	ids := map[string]bool{}
	for i, u := range c.Upstreams {
		where := fmt.Sprintf("upstream %d (%q)", i+1, u.ID)
		if err := checkID(u.ID); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if ids[u.ID] {
			return fmt.Errorf("%s: the id is used twice", where)
		}
		ids[u.ID] = true
		if (u.URL == "") == (len(u.Command) == 0) {
			return fmt.Errorf("%s: give exactly one of url and command", where)
		}
		for _, g := range append(append([]string(nil), u.Include...), u.Exclude...) {
			if _, err := path.Match(g, ""); err != nil {
				return fmt.Errorf("%s: bad pattern %q: %w", where, g, err)
			}
		}
		a := u.Auth
		ways := 0
		for _, set := range []bool{a.BearerFile != "", a.Header != "" || a.HeaderFile != "", a.ClientCredentials != nil, a.TokenExchange != nil} {
			if set {
				ways++
			}
		}
		if ways > 1 {
			return fmt.Errorf("%s: auth: give one of bearer_file, header with header_file, client_credentials and token_exchange", where)
		}
		if cc := a.ClientCredentials; cc != nil {
			if cc.Issuer == "" || cc.ClientID == "" || cc.SecretFile == "" {
				return fmt.Errorf("%s: auth: client_credentials needs issuer, client_id and client_secret_file", where)
			}
			if u.URL == "" {
				return fmt.Errorf("%s: auth: client_credentials is for an upstream over HTTP (url)", where)
			}
		}
		if err := a.TokenExchange.check(u.URL); err != nil {
			return fmt.Errorf("%s: auth: %w", where, err)
		}
		if (a.Header == "") != (a.HeaderFile == "") {
			return fmt.Errorf("%s: auth: header and header_file go together", where)
		}
		if u.Protocol != "" && !knownVersion(u.Protocol) {
			return fmt.Errorf("%s: protocol %q is not a revision tidings speaks", where, u.Protocol)
		}
	}
	for i, r := range c.Callers {
		for _, id := range r.Upstreams {
			if !ids[id] {
				return fmt.Errorf("caller rule %d: no upstream has the id %q", i+1, id)
			}
		}
		for _, g := range r.Exclude {
			if _, err := path.Match(g, ""); err != nil {
				return fmt.Errorf("caller rule %d: bad pattern %q: %w", i+1, g, err)
			}
		}
	}
	return nil
}

func checkID(id string) error {
	if id == "" {
		return errors.New("the id is empty")
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("the id is %d bytes long; at most %d are allowed", len(id), maxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("the id has %q at byte %d; only a-z, 0-9 and '-' are allowed", rune(c), i)
		}
	}
	return nil
}

// knownVersion reports whether the client speaks revision v.
func knownVersion(v string) bool { return slices.Contains(client.Versions(), v) }

// prefix is the prefix of u's names.
func (u *Upstream) prefix() string {
	if u.Prefix != nil {
		return *u.Prefix
	}
	return u.ID + prefixSeparator
}

// maxTTL is the cap on hints and on keeping answers.
func (c *Config) maxTTL() time.Duration {
	if c.MaxTTL <= 0 {
		return defaultMaxTTL
	}
	return time.Duration(c.MaxTTL)
}

func (c *Config) maxItems() int {
	if c.MaxItems <= 0 {
		return defaultMaxItems
	}
	return c.MaxItems
}

func (c *Config) maxKeptBytes() int64 {
	if c.MaxKeptBytes <= 0 {
		return defaultMaxKeptBytes
	}
	return c.MaxKeptBytes
}

func (c *Config) maxExchanged() int {
	if c.MaxExchangedTokens <= 0 {
		return defaultMaxExchanged
	}
	return c.MaxExchangedTokens
}

func (c *Config) pageSize() int {
	if c.PageSize <= 0 {
		return defaultPageSize
	}
	return c.PageSize
}

// matchAny reports whether name matches one of globs.
func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
