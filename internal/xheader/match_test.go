package xheader

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// TestMatchesIntegerExactly: integer arguments compare with the header
// exactly (no float64 rounding), and only plain decimal header spellings
// are accepted.
func TestMatchesIntegerExactly(t *testing.T) {
	for _, tc := range []struct {
		raw, header string
		want        bool
	}{
		{"42", "42", true},
		{"42", "42.0", true},
		{"42", "42.000", true},
		{"42.0", "42", true},
		{"4.2e1", "42", true},
		{"-7", "-7", true},
		{"7", "+7", true},
		{"0", "-0", true},
		{"9007199254740991", "9007199254740991", true},
		{"-9007199254740991", "-9007199254740991", true},
		{"9007199254740991", "9007199254740990", false},
		// Beyond ±(2^53−1) an integer may not be mirrored (XH-3), even
		// digit for digit.
		{"9007199254740992", "9007199254740992", false},
		{"-9007199254740992", "-9007199254740992", false},
		{"123456789012345678901234567890", "123456789012345678901234567890", false},
		{"42", "0x2Ap0", false},
		{"42", "0x2A", false},
		{"42", "4.2e1", false},
		{"42", "42.", false},
		{"42", ".42", false},
		{"42", "42.01", false},
		{"42", "", false},
		{"42", "-", false},
		{"42", "4_2", false},
		{"42", "Inf", false},
		{"42.5", "42.5", false},
		{"1e1000000000", "1", false},
		{`"42"`, "42", false},
	} {
		if got := Matches("integer", jsontext.Value(tc.raw), tc.header); got != tc.want {
			t.Errorf("Matches(integer, %s, %q) = %v, want %v", tc.raw, tc.header, got, tc.want)
		}
	}
}

// TestValueIntegerExactly: an integer argument is written into its header
// digit for digit, up to ±(2^53−1); beyond that it is refused (XH-3).
func TestValueIntegerExactly(t *testing.T) {
	for _, raw := range []string{"9007199254740992", "-9007199254740992", "1e20"} {
		if got, err := Value("integer", jsontext.Value(raw)); err == nil {
			t.Errorf("Value(integer, %s) = %q, want an error: beyond ±(2^53−1)", raw, got)
		}
	}
	for raw, want := range map[string]string{
		"9007199254740991": "9007199254740991",
		"42.0":             "42",
		"4.2e1":            "42",
		"-3":               "-3",
		"1.5":              "1.5",
	} {
		got, err := Value("integer", jsontext.Value(raw))
		if err != nil || got != want {
			t.Errorf("Value(integer, %s) = %q, %v; want %q", raw, got, err, want)
		}
		if err == nil && !Matches("integer", jsontext.Value(raw), got) && raw != "1.5" {
			t.Errorf("Value(integer, %s) = %q does not match its own argument", raw, got)
		}
	}
}
