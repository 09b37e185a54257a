package controller_test

import "sigs.k8s.io/controller-runtime/pkg/config"

// ctrlConfig lets the suite restart the manager in one process: controller names must be unique
// per process otherwise.
func ctrlConfig() config.Controller {
	skip := true
	return config.Controller{SkipNameValidation: &skip}
}
