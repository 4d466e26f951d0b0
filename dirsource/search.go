package dirsource

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"

	"tidings/jsonrpc"
)

// compileRegexp compiles a search_files pattern, refusing one whose
// program has more than limit instructions: RE2's time per byte grows
// with the program, and a pattern's length says little about its
// program's size. It returns the size, which is what matching a byte
// costs at most. The refusal is a *jsonrpc.Error (-32602); a pattern that
// does not parse is a plain error, for the model to correct.
func compileRegexp(expr string, limit int) (*regexp.Regexp, int, error) {
	// regexp.Compile parses with the same flags and simplifies the same
	// way before it compiles, so this is the size of the program that
	// will run.
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression: %w", err)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression: %w", err)
	}
	if size := len(prog.Inst); size > limit {
		return nil, 0, jsonrpc.NewError(jsonrpc.CodeInvalidParams,
			fmt.Sprintf("regular expression too large: the pattern compiles to %d instructions, over the limit of %d; "+
				"use smaller repetition counts ({m,n}) or a plain string", size, limit),
			map[string]any{"limit": limit, "size": size, "reason": "regexp_too_large"})
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression: %w", err)
	}
	return re, len(prog.Inst), nil
}

// checkWork is how much matching work (bytes times program size) is done
// between two looks at the context: a few milliseconds at most, so that
// a search stops promptly when its caller gives up or its time is up.
const checkWork = 1 << 20

// matcher tells whether lines match a query, looking at the context as
// the work mounts. Lines are matched whole, so a match is found wherever
// it is; a line too long to match between two looks is fed to the
// regular expression rune by rune instead, which lets the look happen in
// the middle of the line.
type matcher struct {
	literal []byte
	re      *regexp.Regexp // nil: look for literal
	cost    int            // work per byte: 1 for a literal, the program size for a regexp
	work    int            // done since the last look
}

// match reports whether line matches, or the context's error once it has
// ended.
func (m *matcher) match(ctx context.Context, line []byte) (bool, error) {
	w := (len(line) + 1) * m.cost
	if m.work += w; m.work >= checkWork {
		m.work = 0
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	switch {
	case m.re == nil:
		return bytes.Contains(line, m.literal), nil
	case w <= checkWork:
		return m.re.Match(line), nil
	}
	r := &ctxRunes{ctx: ctx, b: line, every: max(1, checkWork/m.cost)}
	ok := m.re.MatchReader(r)
	if r.err != nil {
		return false, r.err
	}
	return ok, nil
}

// ctxRunes reads the runes of b, and ends early, with the context's
// error, once the context has ended; the regular expression takes any
// error for the end of its input, so the match stops there.
type ctxRunes struct {
	ctx   context.Context
	b     []byte
	every int // runes between looks at ctx
	n     int
	err   error
}

func (r *ctxRunes) ReadRune() (rune, int, error) {
	if r.err != nil {
		return 0, 0, r.err
	}
	if len(r.b) == 0 {
		return 0, 0, io.EOF
	}
	if r.n++; r.n >= r.every {
		r.n = 0
		if err := r.ctx.Err(); err != nil {
			r.err = err
			return 0, 0, err
		}
	}
	c, size := utf8.DecodeRune(r.b)
	r.b = r.b[size:]
	return c, size, nil
}
