package store

import (
	"errors"
	"fmt"
)

// Check reports what is wrong with p before any write: a renewal needs an
// owner and a positive LeaseTTL. A lease that lapses now or earlier is not
// a renewal; RunRelease is how an owner gives its runs up.
func (p *RunRenewParams) Check() error {
	var errs []error
	if p.Owner == "" {
		errs = append(errs, errors.New("owner is required"))
	}
	if p.LeaseTTL <= 0 {
		errs = append(errs, fmt.Errorf("lease ttl must be positive, got %v (RunRelease releases)", p.LeaseTTL))
	}
	return errors.Join(errs...)
}

// Check reports what is wrong with p before any write: a release needs an
// owner.
func (p *RunReleaseParams) Check() error {
	if p.Owner == "" {
		return errors.New("owner is required")
	}
	return nil
}
