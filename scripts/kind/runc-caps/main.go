// Command runc-caps runs runc with the capabilities of an OCI process limited to the caller's
// capability bounding set, for hosts whose bounding set lacks some capabilities (here
// CAP_SYS_RESOURCE): runc asks for every capability for a privileged container and then fails
// with "unable to apply caps: operation not permitted". Registered as Docker's default runtime
// (and as the runc binary of the kind nodes' containerd) only on such hosts; elsewhere it is
// never installed. It edits `config.json` of the bundle for `create`/`run` and the `--process`
// file for `exec`, then execs the real runc with the same arguments.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames lists the Linux capabilities by number (include/uapi/linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	real := os.Getenv("RUNC_CAPS_REAL")
	if real == "" {
		real = firstExisting("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc.real")
	}
	if err := limit(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "runc-caps: %v\n", err)
		os.Exit(1)
	}
	args := append([]string{real}, os.Args[1:]...)
	if err := syscall.Exec(real, args, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runc-caps: exec %s: %v\n", real, err)
		os.Exit(127)
	}
}

func firstExisting(paths ...string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return paths[0]
}

// limit finds the OCI file the runc command line names and drops the capabilities outside
// the bounding set from it.
func limit(args []string) error {
	cmd, bundle, process := "", "", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() string {
			if j := strings.IndexByte(a, '='); j >= 0 {
				return a[j+1:]
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b" || strings.HasPrefix(a, "--bundle="):
			bundle = value()
		case a == "--process" || a == "-p" || strings.HasPrefix(a, "--process="):
			process = value()
		case cmd == "" && (a == "--root" || a == "--log" || a == "--log-format" || a == "--criu" || a == "--rootless"):
			i++ // a global option with a value
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		}
	}
	bounding, err := boundingSet()
	if err != nil {
		return err
	}
	switch cmd {
	case "create", "run":
		if bundle == "" {
			bundle = "."
		}
		return rewrite(filepath.Join(bundle, "config.json"), bounding, true)
	case "exec":
		if process != "" {
			return rewrite(process, bounding, false)
		}
	}
	return nil
}

func boundingSet() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapBnd in /proc/self/status")
}

// rewrite filters process.capabilities (a bundle's config.json) or capabilities (an exec
// process file), keeping every other field and number exactly as it was.
func rewrite(path string, bounding uint64, inConfig bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	holder := doc
	if inConfig {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		holder = p
	}
	caps, ok := holder["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	changed := false
	for set, list := range caps {
		names, ok := list.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(names))
		for _, n := range names {
			if name, ok := n.(string); ok && !allowed(name, bounding) {
				changed = true
				continue
			}
			kept = append(kept, n)
		}
		caps[set] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

func allowed(name string, bounding uint64) bool {
	for i, n := range capNames {
		if n == name {
			return bounding&(1<<uint(i)) != 0
		}
	}
	return true // a capability this table does not know: leave it to runc
}
