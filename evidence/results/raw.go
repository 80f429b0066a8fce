package results

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/audioproof/audioproof/checkpoints/compare"
)

// SlotFields are the /v1/models fields only the parallel runtime reports;
// model lists are compared across runtimes without them.
var SlotFields = []string{"slots", "active_slots", "queued_requests", "max_parallel_slots"}

// CompareOptions are the comparison options for an exchange kind.
func CompareOptions(kind string) compare.Options {
	if kind == KindModels {
		return compare.Options{DropDataFields: SlotFields}
	}
	return compare.Options{}
}

// RawRequest is the request file of an exchange (raw/.../NN-step.request.json).
type RawRequest struct {
	Method   string              `json:"method"`
	URL      string              `json:"url"`
	Header   map[string][]string `json:"header,omitempty"`
	BodyFile string              `json:"body_file,omitempty"`
	JSON     json.RawMessage     `json:"json,omitempty"` // the body, when it is JSON
}

// RawResponse is the response file of an exchange; the body is stored
// byte for byte next to it.
type RawResponse struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header"`
}

// SHA256 returns the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// LoadResponse reads an exchange's stored response through read (a function
// from evidence-relative path to bytes).
func LoadResponse(read func(string) ([]byte, error), e Exchange) (compare.Response, error) {
	var resp compare.Response
	if e.ResponseFile == "" {
		return resp, fmt.Errorf("exchange %s has no stored response", e.ID)
	}
	meta, err := read(e.ResponseFile)
	if err != nil {
		return resp, err
	}
	var raw RawResponse
	if err := json.Unmarshal(meta, &raw); err != nil {
		return resp, fmt.Errorf("%s: %w", e.ResponseFile, err)
	}
	resp.Status = raw.Status
	resp.Header = http.Header(raw.Header)
	if e.BodyFile != "" {
		if resp.Body, err = read(e.BodyFile); err != nil {
			return resp, err
		}
	}
	return resp, nil
}

// Recheck recomputes every verdict that depends on stored responses: body
// hashes and statuses against results.json, each "match" check by comparing
// the stored responses again, that every answered candidate exchange was
// compared, and the totals. It returns one line per inconsistency.
func Recheck(r *Results, read func(string) ([]byte, error)) []string {
	var problems []string
	byID := map[string]Exchange{}
	loaded := map[string]compare.Response{}
	for _, e := range r.Exchanges {
		byID[e.ID] = e
		if e.ResponseFile == "" {
			continue
		}
		resp, err := LoadResponse(read, e)
		if err != nil {
			problems = append(problems, fmt.Sprintf("exchange %s: cannot read stored response: %v", e.ID, err))
			continue
		}
		if resp.Status != e.Status {
			problems = append(problems, fmt.Sprintf("exchange %s: results.json says status %d, stored response has %d", e.ID, e.Status, resp.Status))
		}
		if e.BodyFile != "" && SHA256(resp.Body) != e.BodySHA256 {
			problems = append(problems, fmt.Sprintf("exchange %s: stored body sha256 %s does not match results.json %s", e.ID, SHA256(resp.Body), e.BodySHA256))
		}
		loaded[e.ID] = resp
	}
	checked := map[string]bool{}
	for _, c := range r.Checks {
		if c.Kind != CheckMatch {
			continue
		}
		checked[c.Exchange] = true
		e, okE := byID[c.Exchange]
		_, okA := byID[c.Against]
		if !okE || !okA {
			problems = append(problems, fmt.Sprintf("check %s: exchange %q or reference %q missing", c.Name(), c.Exchange, c.Against))
			continue
		}
		got, ok1 := loaded[c.Exchange]
		ref, ok2 := loaded[c.Against]
		if !ok1 || !ok2 {
			if c.Passed {
				problems = append(problems, fmt.Sprintf("check %s: marked as matched but a response is missing", c.Name()))
			}
			continue
		}
		d := compare.Exact(ref, got, CompareOptions(e.Kind))
		switch {
		case d == nil && !c.Passed:
			problems = append(problems, fmt.Sprintf("check %s: recorded as different but the stored responses are equal", c.Name()))
		case d != nil && c.Passed:
			problems = append(problems, fmt.Sprintf("check %s: recorded as matched but the stored responses differ at %s", c.Name(), d))
		case d != nil && d.Path != c.Path:
			problems = append(problems, fmt.Sprintf("check %s: recorded first difference %q, stored responses differ first at %q", c.Name(), c.Path, d.Path))
		}
	}
	for _, e := range r.Exchanges {
		if r.Reference == "" || e.Variant == r.Reference || e.Error != "" || checked[e.ID] {
			continue
		}
		problems = append(problems, fmt.Sprintf("exchange %s was answered but has no comparison with the reference", e.ID))
	}
	if t := Compute(r); t != r.Totals {
		problems = append(problems, fmt.Sprintf("totals in results.json %+v differ from the totals recomputed from its checks %+v", r.Totals, t))
	}
	passed := Compute(r).RequiredFailed == 0
	for _, x := range r.CrossBackend {
		if x.Required && !x.Within {
			passed = false
		}
	}
	if passed != r.Passed {
		problems = append(problems, fmt.Sprintf("results.json says passed=%v, its checks say passed=%v", r.Passed, passed))
	}
	return problems
}
