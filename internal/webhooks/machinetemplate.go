package webhooks

import (
	"errors"
	"fmt"
	"path"

	"github.com/distribution/reference"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/hostpath"
	"github.com/capdmp/capdmp/internal/nodeimage"
)

// defaultMachineTemplate fills the empty fields of the containers' template.
func defaultMachineTemplate(template *infrav1.DockerMachinePoolMachineTemplate) {
	if template.BootstrapTimeout == nil {
		template.BootstrapTimeout = &metav1.Duration{Duration: infrav1.DefaultBootstrapTimeout}
	}
}

// validateMachineTemplate checks what the CRD schema cannot check statically, extra mounts' host
// paths against the manager's policy among them. It returns errors with their field paths and
// warnings for what is allowed but probably a mistake.
func validateMachineTemplate(template *infrav1.DockerMachinePoolMachineTemplate, fldPath *field.Path, hostPaths hostpath.Policy) (field.ErrorList, []string) {
	var allErrs field.ErrorList
	var warnings []string

	if template.CustomImage != "" {
		// The controller reads the pool's target version from this tag with the same function, so
		// an image accepted here is always one the version-skew gate can read.
		if _, err := nodeimage.VersionOfImage(template.CustomImage); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("customImage"), template.CustomImage,
				fmt.Sprintf("the version-skew gate reads the Kubernetes version from the image's tag: %v", err)))
		}
	}

	seenImages := make(map[string]int, len(template.PreLoadImages))
	for i, image := range template.PreLoadImages {
		imgPath := fldPath.Child("preLoadImages").Index(i)
		// The controller checks them again with the same function before it loads them.
		named, err := nodeimage.ParseReference(image)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(imgPath, image,
				fmt.Sprintf("must be an image reference such as registry.example/app:v1 or app@sha256:<digest>: %v", err)))
			continue
		}
		canonical := reference.TagNameOnly(named).String()
		if first, ok := seenImages[canonical]; ok {
			warnings = append(warnings, fmt.Sprintf("%s: %q is the same image as %s and is loaded only once",
				imgPath, image, fldPath.Child("preLoadImages").Index(first)))
			continue
		}
		seenImages[canonical] = i
	}

	seenPaths := make(map[string]int, len(template.ExtraMounts))
	for i, mount := range template.ExtraMounts {
		hostPathField := fldPath.Child("extraMounts").Index(i).Child("hostPath")
		if err := container.CheckExtraMountSource(mount.HostPath); err != nil {
			allErrs = append(allErrs, mountPathError(hostPathField, mount.HostPath, err))
		}
		if err := hostPaths.Check(mount.HostPath); err != nil {
			allErrs = append(allErrs, field.Forbidden(hostPathField, err.Error()))
		}
		mountPath := fldPath.Child("extraMounts").Index(i).Child("containerPath")
		// The controller checks both paths again with the same functions before it creates a
		// container.
		if err := container.CheckExtraMountTarget(mount.ContainerPath); err != nil {
			allErrs = append(allErrs, mountPathError(mountPath, mount.ContainerPath, err))
		}
		// Docker refuses two mounts on one mount point however the path is spelled.
		cleaned := path.Clean(mount.ContainerPath)
		if first, ok := seenPaths[cleaned]; ok {
			duplicate := field.Duplicate(mountPath, mount.ContainerPath)
			duplicate.Detail = fmt.Sprintf("%s mounts the same container path; Docker mounts each path once",
				fldPath.Child("extraMounts").Index(first).Child("containerPath"))
			allErrs = append(allErrs, duplicate)
			continue
		}
		seenPaths[cleaned] = i
	}

	return allErrs, warnings
}

// mountPathError is the field error of a mount path the container runtime refuses: Invalid
// when no bind can hold it as written, Forbidden when it is where the node needs something.
func mountPathError(fldPath *field.Path, value string, err error) *field.Error {
	if errors.Is(err, container.ErrNotBindable) {
		return field.Invalid(fldPath, value, err.Error())
	}
	return field.Forbidden(fldPath, err.Error())
}

// validateStrategy checks a pool's rollout strategy: counts and percentages that are not
// negative, maxUnavailable at most 100%, and not both 0, which would leave a rollout nothing to do.
func validateStrategy(strategy infrav1.DockerMachinePoolStrategy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	update := strategy.RollingUpdate
	path := fldPath.Child("rollingUpdate")
	// The controller reads the values with the same function (poolScope.rollingUpdate).
	check := func(name string, v *intstr.IntOrString, maxPercent int) bool {
		if v == nil {
			return false
		}
		p := path.Child(name)
		var shown any = v.StrVal
		if v.Type == intstr.Int {
			shown = v.IntVal
		}
		// Scaled against 100, a percentage is its number.
		n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false)
		switch {
		case err != nil:
			allErrs = append(allErrs, field.Invalid(p, shown, "must be a number or a percentage such as \"25%\""))
		case n < 0:
			allErrs = append(allErrs, field.Invalid(p, shown, "must not be negative"))
		case v.Type == intstr.String && maxPercent > 0 && n > maxPercent:
			allErrs = append(allErrs, field.Invalid(p, shown, fmt.Sprintf("must not be above %d%%", maxPercent)))
		}
		return err == nil && n == 0
	}
	surgeZero := check("maxSurge", update.MaxSurge, 0)
	unavailableZero := check("maxUnavailable", update.MaxUnavailable, 100)
	// Unset maxUnavailable is 0: a maxSurge of 0 needs a maxUnavailable above 0.
	if surgeZero && (update.MaxUnavailable == nil || unavailableZero) {
		unavailable := ptr.Deref(update.MaxUnavailable, intstr.FromInt32(0))
		allErrs = append(allErrs, field.Invalid(path.Child("maxUnavailable"), unavailable.String(), "must be above 0 when maxSurge is 0"))
	}
	return allErrs
}

// validateRemediation checks spec.remediation: maxInFlight is a number of at least 1 or a
// percentage above 0% and at most 100%, which the controller reads with the same function
// (poolScope.maxRemediationsInFlight).
func validateRemediation(remediation infrav1.DockerMachinePoolRemediation, fldPath *field.Path) field.ErrorList {
	v := remediation.MaxInFlight
	if v == nil {
		return nil
	}
	p := fldPath.Child("maxInFlight")
	// Scaled against 100, a percentage is its number.
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, v.String(), "must be a number or a percentage such as \"25%\"")}
	case n < 1:
		return field.ErrorList{field.Invalid(p, v.String(), "must be at least 1 (or 1%): a pool that may replace none would never remediate")}
	case v.Type == intstr.String && n > 100:
		return field.ErrorList{field.Invalid(p, v.String(), "must not be above 100%")}
	}
	return nil
}
