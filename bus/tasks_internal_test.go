package bus

import (
	"context"
	"testing"
	"time"
)

// TestLocalTasksSweepWithoutCreate: a store only read and updated after
// its tasks expire still lets go of them, not only at the next Create.
func TestLocalTasksSweepWithoutCreate(t *testing.T) {
	now := time.Unix(1000, 0)
	ctx := context.Background()
	for name, use := range map[string]func(s *LocalTasks){
		"get":    func(s *LocalTasks) { _, _, _ = s.Get(ctx, "other") },
		"update": func(s *LocalTasks) { _, _ = s.Update(ctx, "other", nil, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			s := NewLocalTasks()
			s.now = func() time.Time { return now }
			for _, id := range []string{"a", "b", "other"} {
				exp := now.Add(time.Minute)
				if id == "other" {
					exp = now.Add(time.Hour)
				}
				if err := s.Create(ctx, id, []byte("x"), exp); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(2 * time.Minute)
			use(s)
			if len(s.m) != 1 {
				t.Fatalf("%d records held after the expiry of all but one", len(s.m))
			}
		})
	}
}
