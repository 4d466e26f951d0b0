//go:build unix

package dirsource_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"tidings/mcp"
)

const unprivileged = "DIRSOURCE_TEST_UNPRIVILEGED"

// asUnprivileged runs the calling test in a copy of the test binary as
// the user nobody when the tests run as root, who may read any file
// whatever its mode. It reports whether the caller should go on (it is
// not root, or is the copy).
func asUnprivileged(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return true
	}
	if os.Getenv(unprivileged) != "" {
		t.Fatal("still root in the unprivileged copy")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent is closed to other users.
	dir, err := os.MkdirTemp("", "dirsource-unprivileged")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, d := range []string{dir, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dirsource.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), unprivileged+"=1", "TMPDIR="+filepath.Join(dir, "tmp"), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Skipf("cannot run as nobody: %v", err)
		}
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody, the test did not pass:\n%s", out)
	}
	return false
}

func TestPermissionDenied(t *testing.T) {
	if !asUnprivileged(t) {
		return
	}
	f := newFixture(t, map[string]string{"a.txt": "a", "secret.txt": "s", "d/x.txt": "x"})
	// Made unreadable before the source starts: never listed, and a read
	// says why it fails.
	mustDo(t, os.Chmod(filepath.Join(f.root, "secret.txt"), 0))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(f.root, "d"), 0o755) })
	f.run(t)
	if slices.Contains(f.allURIs(t), f.uri("secret.txt")) {
		t.Error("an unreadable file is listed")
	}
	r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("secret.txt")})
	if r.Error == nil || !strings.Contains(r.Error.Message, "permission denied") || r.Error.Data["uri"] != f.uri("secret.txt") {
		t.Errorf("read of an unreadable file = %+v, want permission denied", r)
	}
	tr := f.tool(t, "file_info", map[string]any{"path": "secret.txt"})
	if !tr.IsError || !strings.Contains(tr.Content[0].Text, "permission denied") || strings.Contains(tr.Content[0].Text, f.base) {
		t.Errorf("file_info of an unreadable file = %+v", tr)
	}

	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			const denied = "error: Resource unreadable: permission denied"
			u := era.subscribe(t, f, f.uri("a.txt"))
			mustDo(t, os.Chmod(filepath.Join(f.root, "a.txt"), 0))
			f.untilState(t, u, "a.txt", denied)
			mustDo(t, os.Chmod(filepath.Join(f.root, "a.txt"), 0o644))
			f.untilState(t, u, "a.txt", "a")

			u = era.subscribe(t, f, f.uri("d/x.txt"))
			mustDo(t, os.Chmod(filepath.Join(f.root, "d"), 0))
			f.untilState(t, u, "d/x.txt", denied)
			mustDo(t, os.Chmod(filepath.Join(f.root, "d"), 0o755))
			f.untilState(t, u, "d/x.txt", "x")
		})
	}
}
