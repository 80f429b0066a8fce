package runtimes

import "github.com/audioproof/audioproof/server/apierror"

// UnknownModel is the 404 both runtimes (and the HTTP layer) answer for a
// model id that is not registered. One wording keeps the runtimes' answers
// byte-for-byte equal, which the parity checks require.
func UnknownModel(id string) error {
	return apierror.NotFoundf("model %q is not registered; GET /v1/models lists the registered models", id)
}
