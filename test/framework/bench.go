package framework

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// BenchDir is where the bench drivers write their results.
func BenchDir() string { return filepath.Join(testenv.RepoRoot(), "_artifacts", "bench") }

// WriteBenchFile writes content as name in BenchDir, making the folder.
func WriteBenchFile(name string, content []byte) error {
	if err := os.MkdirAll(BenchDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(BenchDir(), name), content, 0o644)
}

// BenchJSON is v as indented JSON, with "<" and ">" as they are: figures say "0->20".
func BenchJSON(v any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// BenchSetting reads a bench size from the environment: a whole number, def when unset or not one.
func BenchSetting(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

// Commit is the tree's `git describe --always --dirty`, for results to say what they measured.
func Commit() string {
	out, err := exec.Command("git", "-C", testenv.RepoRoot(), "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Quantiles summarize a bench's trials in milliseconds: the median, the 95th percentile (nearest
// rank), the largest and every trial, sorted.
type Quantiles struct {
	MedianMs float64   `json:"medianMs"`
	P95Ms    float64   `json:"p95Ms"`
	MaxMs    float64   `json:"maxMs"`
	AllMs    []float64 `json:"allMs"`
}

// QuantilesOf summarizes ds; it is zero when ds is empty.
func QuantilesOf(ds []time.Duration) Quantiles {
	ms := make([]float64, 0, len(ds))
	for _, d := range ds {
		ms = append(ms, float64(d.Microseconds())/1000)
	}
	if len(ms) == 0 {
		return Quantiles{}
	}
	slices.Sort(ms)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ms)))) - 1
		return ms[max(0, min(i, len(ms)-1))]
	}
	return Quantiles{MedianMs: rank(0.5), P95Ms: rank(0.95), MaxMs: ms[len(ms)-1], AllMs: ms}
}
