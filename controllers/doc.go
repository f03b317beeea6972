// Package controllers holds CAPDMP's reconcilers: DockerMachinePool, which owns the pool's
// containers, its version-skew gate and its bootstrap data freshness, and DockerMachinePoolMachine,
// which bootstraps and deletes one container each.
package controllers
