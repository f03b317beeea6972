package hostsysctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRecordAndRestore(t *testing.T) {
	keep := []string{"vm/overcommit_memory", "kernel/panic"}
	raise := map[string]int{"fs/inotify/max_user_instances": 8192}

	tests := []struct {
		name string
		// host is the tree before Record; changes are written by "the kubelet" while running.
		host    map[string]string
		changes map[string]string
		// stateFile is a state file left by an earlier run; "" leaves none.
		stateFile string
		// wantWhileRunning is the host after Record.
		wantWhileRunning map[string]string
		// wantAfter is the host after Restore.
		wantAfter map[string]string
		// wantStateKept is true when Restore must leave the state file (another run owns it).
		wantStateKept bool
		// wantLog is a line Record or Restore must log; "" asks for none in particular.
		wantLog string
	}{
		{
			name:             "kubelet's changes are undone and a low limit is raised, then lowered",
			host:             map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "128"},
			changes:          map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10"},
			wantWhileRunning: map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "8192"},
			wantAfter:        map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "128"},
			wantLog:          "Raised sysctl %s from %s to %d while running",
		},
		{
			name:             "a limit already high enough is left alone",
			host:             map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "10000"},
			wantWhileRunning: map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "10000"},
			wantAfter:        map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "10000"},
		},
		{
			name: "values a killed run recorded win over what it left on the host",
			host: map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "fs/inotify/max_user_instances": "8192"},
			stateFile: `{"pid": 999999999, "values": {"vm/overcommit_memory": "0", "kernel/panic": "0",
				"fs/inotify/max_user_instances": "128"}}`,
			wantWhileRunning: map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "fs/inotify/max_user_instances": "8192"},
			wantAfter:        map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "fs/inotify/max_user_instances": "128"},
			wantLog:          "Sysctl %s=%s was recorded by a run that did not restore it",
		},
		{
			name: "a run that still lives keeps its state file; this one restores what it saw",
			host: map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "fs/inotify/max_user_instances": "8192"},
			stateFile: `{"pid": 1, "values": {"vm/overcommit_memory": "0", "kernel/panic": "0",
				"fs/inotify/max_user_instances": "128"}}`,
			changes:          map[string]string{"kernel/panic": "5"},
			wantWhileRunning: map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "fs/inotify/max_user_instances": "8192"},
			wantAfter:        map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "fs/inotify/max_user_instances": "8192"},
			wantStateKept:    true,
			wantLog:          "Sysctls are recorded by process %d, which still runs; it restores them",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			root := filepath.Join(dir, "sys")
			writeTree(t, root, tt.host)
			stateFile := filepath.Join(dir, "cache", "host-sysctls.json")
			if tt.stateFile != "" {
				g.Expect(os.MkdirAll(filepath.Dir(stateFile), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(stateFile, []byte(tt.stateFile), 0o644)).To(Succeed())
			}
			var logged []string
			h := Host{Root: root, StateFile: stateFile, Logf: func(format string, _ ...any) {
				logged = append(logged, format)
			}}

			snapshot, err := h.Record(keep, raise)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(readTree(t, root)).To(Equal(tt.wantWhileRunning))
			g.Expect(stateFile).To(BeAnExistingFile(), "the recorded values must outlive a killed run")

			writeTree(t, root, tt.changes)
			g.Expect(snapshot.Restore()).To(Succeed())
			g.Expect(readTree(t, root)).To(Equal(tt.wantAfter))
			if tt.wantStateKept {
				g.Expect(stateFile).To(BeAnExistingFile())
			} else {
				g.Expect(stateFile).NotTo(BeAnExistingFile())
			}
			if tt.wantLog != "" {
				g.Expect(logged).To(ContainElement(tt.wantLog))
			}
		})
	}
}

func TestRecordWritesWhatAKilledRunNeeds(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "sys")
	writeTree(t, root, map[string]string{"kernel/panic": "0", "fs/inotify/max_user_instances": "128"})
	stateFile := filepath.Join(dir, "host-sysctls.json")

	_, err := Host{Root: root, StateFile: stateFile}.Record([]string{"kernel/panic"}, map[string]int{"fs/inotify/max_user_instances": 8192})
	g.Expect(err).NotTo(HaveOccurred())

	b, err := os.ReadFile(stateFile)
	g.Expect(err).NotTo(HaveOccurred())
	var st state
	g.Expect(json.Unmarshal(b, &st)).To(Succeed())
	g.Expect(st.PID).To(Equal(os.Getpid()))
	g.Expect(st.Values).To(Equal(map[string]string{"kernel/panic": "0", "fs/inotify/max_user_instances": "128"}))
}

func TestRecordFailsOnAMissingSettingToKeep(t *testing.T) {
	g := NewWithT(t)
	_, err := Host{Root: t.TempDir()}.Record([]string{"kernel/panic"}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("reading sysctl kernel.panic")))
}

func TestRecordSkipsAMissingSettingToRaise(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	writeTree(t, root, map[string]string{"fs/inotify/max_user_watches": "100"})
	raise := map[string]int{"fs/inotify/max_user_instances": 8192, "fs/inotify/max_user_watches": 524288}

	snapshot, err := Host{Root: root}.Record(nil, raise)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readTree(t, root)).To(Equal(map[string]string{"fs/inotify/max_user_watches": "524288"}))
	g.Expect(snapshot.Restore()).To(Succeed())
	g.Expect(readTree(t, root)).To(Equal(map[string]string{"fs/inotify/max_user_watches": "100"}))
}

func writeTree(t *testing.T, root string, values map[string]string) {
	t.Helper()
	for name, v := range values {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	values := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		values[rel] = strings.TrimSpace(string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return values
}
