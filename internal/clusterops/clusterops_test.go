package clusterops

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestWaitForReportsWhereItStood(t *testing.T) {
	PollInterval = 5 * time.Millisecond
	t.Cleanup(func() { PollInterval = time.Second })
	tests := []struct {
		name    string
		reports []string // what the condition says in turn; "error" returns an error, and the last repeats
		wantErr string
	}{
		{name: "met", reports: []string{"waiting", "done"}},
		{name: "state at the deadline", reports: []string{"ready=0", "ready=1"}, wantErr: "after 50ms: ready=1"},
		{name: "an error at the deadline keeps the state before it", reports: []string{"ready=1", "error"},
			wantErr: "after 50ms: ready=1 (then error: rate limited)"},
		{name: "only errors", reports: []string{"error"}, wantErr: "after 50ms: error: rate limited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			calls := 0
			err := WaitFor(context.Background(), 50*time.Millisecond, nil, func(context.Context) (bool, string, error) {
				report := tt.reports[min(calls, len(tt.reports)-1)]
				calls++
				switch report {
				case "error":
					return false, "", errors.New("rate limited")
				case "done":
					return true, report, nil
				}
				return false, report, nil
			})
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(tt.wantErr))
		})
	}
}
