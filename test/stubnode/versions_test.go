package stubnode

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/kubeversions"
)

// TestDefaultVersionsLeaveTheRealNodeImagesAlone: a stub tagged kindest/node at a version of the
// real node images would stand where make run and the real tier look for a real node.
func TestDefaultVersionsLeaveTheRealNodeImagesAlone(t *testing.T) {
	g := NewWithT(t)
	for _, v := range kubeversions.Nodes() {
		g.Expect(DefaultVersions).NotTo(ContainElement(v))
	}
}
