package metrics

import (
	"os"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDocumented: docs/controller.md lists every metric registered here.
func TestDocumented(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile("../../docs/controller.md")
	g.Expect(err).ToNot(HaveOccurred())
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	descs := make(chan *prometheus.Desc, 100)
	for _, c := range collectors() {
		c.Describe(descs)
	}
	close(descs)
	n := 0
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		g.Expect(m).To(HaveLen(2), d.String())
		g.Expect(string(doc)).To(ContainSubstring("`"+m[1]+"`"), "docs/controller.md lists %s", m[1])
		n++
	}
	g.Expect(n).To(Equal(9))
}
