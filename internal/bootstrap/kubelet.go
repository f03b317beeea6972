package bootstrap

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeletMaxPodsFlag is the kubelet's flag for its pod capacity; maxPods in its configuration.
const kubeletMaxPodsFlag = "max-pods"

// kubeletConfigurationPatchTarget is kubeadm's patch target for the KubeletConfiguration.
const kubeletConfigurationPatchTarget = "kubeletconfiguration"

// KubeletMaxPods returns the max-pods the kubelet of a node bootstrapped with the data runs with,
// as far as the data says: the JoinConfiguration's nodeRegistration.kubeletExtraArgs max-pods (a
// flag, which wins over the kubelet's configuration file; the last of repeated flags wins, as the
// kubelet parses them), else the maxPods that the kubeletconfiguration patches the data writes in
// the JoinConfiguration's patches.directory leave, applied in kubeadm's order (by file name). ok
// is false when the data sets none: the kubelet then runs with the maxPods of the cluster's
// kubelet-config ConfigMap, which the data does not hold (110, the kubelet's default, unless the
// control plane's configuration set another).
func KubeletMaxPods(data *Data) (maxPods int32, ok bool, err error) {
	jc, err := findJoinConfiguration(data)
	if err != nil {
		return 0, false, err
	}
	args, err := kubeletExtraArgs(jc.NodeRegistration.KubeletExtraArgs)
	if err != nil {
		return 0, false, err
	}
	for i := len(args) - 1; i >= 0; i-- {
		if args[i].name != kubeletMaxPodsFlag {
			continue
		}
		n, err := strconv.ParseInt(args[i].value, 10, 32)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("nodeRegistration.kubeletExtraArgs %s is %q, not a number of pods", kubeletMaxPodsFlag, args[i].value)
		}
		return int32(n), true, nil
	}
	if jc.Patches == nil || jc.Patches.Directory == "" {
		return 0, false, nil
	}
	return patchedMaxPods(data, path.Clean(jc.Patches.Directory))
}

// kubeletArg is one kubelet flag of nodeRegistration.kubeletExtraArgs.
type kubeletArg struct{ name, value string }

// kubeletExtraArgs reads nodeRegistration.kubeletExtraArgs: a map in kubeadm's v1beta3, a list of
// name and value in v1beta4.
func kubeletExtraArgs(raw json.RawMessage) ([]kubeletArg, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(raw, &list); err == nil {
		out := make([]kubeletArg, 0, len(list))
		for _, a := range list {
			out = append(out, kubeletArg{name: a.Name, value: a.Value})
		}
		return out, nil
	}
	var byName map[string]string
	if err := json.Unmarshal(raw, &byName); err != nil {
		return nil, fmt.Errorf("failed to read nodeRegistration.kubeletExtraArgs: neither a list of name and value nor a map: %w", err)
	}
	out := make([]kubeletArg, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, kubeletArg{name: name, value: byName[name]})
	}
	return out, nil
}

// patchedMaxPods applies to maxPods the kubeletconfiguration patches the data writes in dir, as
// kubeadm names them (target[suffix][+patchtype].extension) and orders them (by file name).
func patchedMaxPods(data *Data, dir string) (maxPods int32, ok bool, err error) {
	files, err := dataFiles(data)
	if err != nil {
		return 0, false, fmt.Errorf("failed to read files of %s: %w", data.Format, err)
	}
	type patch struct {
		name, patchType string
		content         []byte
	}
	var patches []patch
	for _, f := range files {
		if path.Dir(path.Clean(f.Path)) != dir {
			continue
		}
		name := path.Base(f.Path)
		patchType, isKubeletPatch := kubeletConfigurationPatchType(name)
		if isKubeletPatch {
			patches = append(patches, patch{name: name, patchType: patchType, content: f.Content})
		}
	}
	slices.SortStableFunc(patches, func(a, b patch) int { return strings.Compare(a.name, b.name) })
	for _, p := range patches {
		n, set, err := patchMaxPods(p.content, p.patchType)
		if err != nil {
			return 0, false, fmt.Errorf("failed to read patch %s: %w", path.Join(dir, p.name), err)
		}
		if set != nil {
			maxPods, ok = n, *set
		}
	}
	return maxPods, ok, nil
}

// kubeletConfigurationPatchType says whether a file of a patches directory is a kubeadm patch of
// the KubeletConfiguration, and of which type: strategic (the default), merge or json.
func kubeletConfigurationPatchType(name string) (string, bool) {
	base, ext := strings.TrimSuffix(name, path.Ext(name)), path.Ext(name)
	if ext != ".yaml" && ext != ".json" {
		return "", false
	}
	target, patchType, _ := strings.Cut(base, "+")
	if !strings.HasPrefix(target, kubeletConfigurationPatchTarget) {
		return "", false
	}
	switch patchType {
	case "", "strategic":
		return "strategic", true
	case "merge", "json":
		return patchType, true
	}
	return "", false
}

// patchMaxPods reads what a patch does to maxPods: set is nil when it leaves it alone, false when
// it removes it (back to the configuration it patches), true when it sets it to maxPods.
func patchMaxPods(content []byte, patchType string) (maxPods int32, set *bool, err error) {
	raw, err := yaml.YAMLToJSON(content)
	if err != nil {
		return 0, nil, err
	}
	readValue := func(v json.RawMessage) (int32, *bool, error) {
		if string(v) == "null" {
			return 0, new(bool), nil
		}
		var n int32
		if err := json.Unmarshal(v, &n); err != nil || n < 0 {
			return 0, nil, fmt.Errorf("maxPods is %s, not a number of pods", v)
		}
		isSet := true
		return n, &isSet, nil
	}
	if patchType == "json" {
		var ops []struct {
			Op    string          `json:"op"`
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &ops); err != nil {
			return 0, nil, err
		}
		for _, op := range ops {
			if op.Path != "/maxPods" {
				continue
			}
			switch op.Op {
			case "add", "replace":
				if maxPods, set, err = readValue(op.Value); err != nil {
					return 0, nil, err
				}
			case "remove":
				maxPods, set = 0, new(bool)
			}
		}
		return maxPods, set, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return 0, nil, err
	}
	v, found := fields["maxPods"]
	if !found {
		return 0, nil, nil
	}
	return readValue(v)
}
