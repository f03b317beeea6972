package stubnode_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/test/stubnode"
)

// TestBuild: each version's image says its version where kind and CAPDMP read it, shares the
// root filesystem layer, and an image of the same tag not built here is never replaced.
func TestBuild(t *testing.T) {
	host := dockerengine.Require(t)
	ctx := context.Background()
	g := NewWithT(t)
	versions := []string{"v1.30.13", "v1.31.9"}
	g.Expect(stubnode.Build(ctx, stubnode.Options{Versions: versions, Log: logWriter{t}})).To(Succeed())

	var baseLayers []string
	for _, v := range versions {
		config, err := dockerengine.Docker(ctx, host, nil, "image", "inspect", "--format",
			`{{json .Config.Entrypoint}} {{.Config.StopSignal}} {{index .Config.Labels "`+stubnode.VersionLabel+`"}} {{index .RootFS.Layers 0}}`, stubnode.Image(v))
		g.Expect(err).ToNot(HaveOccurred())
		fields := strings.Fields(config)
		g.Expect(fields).To(HaveLen(4))
		g.Expect(fields[:3]).To(Equal([]string{`["/sbin/init"]`, "SIGRTMIN+3", v}))
		baseLayers = append(baseLayers, fields[3])

		files, err := dockerengine.Docker(ctx, host, nil, "run", "--rm", "--pull=never", "--entrypoint", "/bin/sh", stubnode.Image(v),
			"-c", "cat /kind/version; stat -c %A /tmp; kubeadm version -o short")
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(strings.Fields(files)).To(Equal([]string{v, "drwxrwxrwt", v}))
	}
	g.Expect(baseLayers[0]).To(Equal(baseLayers[1]), "the versions share the root filesystem layer")

	foreign := "v1.29.99-foreign"
	_, err := dockerengine.Docker(ctx, host, []byte("FROM "+stubnode.Image(versions[0])+"\nLABEL "+stubnode.BuiltLabel+"=\n"),
		"build", "--quiet", "--tag", stubnode.Image(foreign), "-")
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _, _ = dockerengine.Docker(context.Background(), host, nil, "rmi", stubnode.Image(foreign)) })
	g.Expect(stubnode.Build(ctx, stubnode.Options{Versions: []string{foreign}})).To(MatchError(ContainSubstring("not replacing it")))
}
