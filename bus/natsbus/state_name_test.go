package natsbus

import "testing"

// TestBucketNamesDoNotCollide: subjects that differ name different
// buckets, so two clusters on one NATS never share their switches.
func TestBucketNamesDoNotCollide(t *testing.T) {
	seen := map[string]string{}
	for _, subject := range []string{"a.b", "a_b", "a_2Eb", "a__b", "a..b", "tidings", "a-b"} {
		b, err := bucketName(subject)
		if err != nil {
			t.Fatalf("%q: %v", subject, err)
		}
		if other, ok := seen[b]; ok {
			t.Fatalf("%q and %q both name bucket %q", other, subject, b)
		}
		seen[b] = subject
	}
	if _, err := bucketName("a b"); err == nil {
		t.Fatal("a subject with a space named a bucket")
	}
}
