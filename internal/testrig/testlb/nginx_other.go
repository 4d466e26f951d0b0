//go:build !unix

package testlb

import "errors"

// errNoNginx says why nginx cannot run here: it is stopped through
// process groups and signals, which only Unix has.
var errNoNginx = errors.New("testlb: nginx runs on Unix only")

// nginxBinary reports that nginx is not available here.
func nginxBinary() (string, error) { return "", errNoNginx }

// RunNginx fails: nginx runs on Unix only.
func RunNginx(Options, ...string) (*LB, error) { return nil, errNoNginx }
