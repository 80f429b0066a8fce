package results

import (
	"encoding/xml"
	"fmt"
	"io"
)

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

// WriteJUnit writes every check as a JUnit test case, one suite per backend
// (checks without a backend go to suite "run"). A failed optional check is
// reported as skipped with its message, so that CI shows it without failing.
func WriteJUnit(w io.Writer, r *Results) error {
	root := junitSuites{Name: r.Kind + " " + r.Plan.Name}
	index := map[string]int{}
	suite := func(name string) *junitSuite {
		if name == "" {
			name = "run"
		}
		i, ok := index[name]
		if !ok {
			i = len(root.Suites)
			index[name] = i
			root.Suites = append(root.Suites, junitSuite{Name: name})
		}
		return &root.Suites[i]
	}
	add := func(s *junitSuite, c junitCase) {
		s.Tests++
		root.Tests++
		if c.Failure != nil {
			s.Failures++
			root.Failures++
		}
		s.Cases = append(s.Cases, c)
	}
	for _, c := range r.Checks {
		jc := junitCase{Name: c.Name(), ClassName: c.Kind}
		if !c.Passed {
			text := c.Message
			if c.Path != "" {
				text += fmt.Sprintf("\nfirst difference at %s\nwant: %s\ngot:  %s", c.Path, c.Want, c.Got)
			}
			if c.Required {
				jc.Failure = &junitFailure{Message: c.Message, Type: c.Kind, Text: text}
			} else {
				jc.Skipped = &junitSkipped{Message: "optional check failed: " + c.Message}
			}
		}
		add(suite(c.Backend), jc)
	}
	for _, x := range r.CrossBackend {
		jc := junitCase{Name: fmt.Sprintf("cross_backend %s vs %s %s %s %s", x.Against, x.Backend, x.Variant, x.Model, x.Step), ClassName: CheckCross}
		if !x.Within {
			msg := fmt.Sprintf("out of tolerance at %s: %s vs %s", x.Path, x.Want, x.Got)
			if x.Required {
				jc.Failure = &junitFailure{Message: msg, Type: CheckCross, Text: msg}
			} else {
				jc.Skipped = &junitSkipped{Message: "reported only: " + msg}
			}
		}
		add(suite("cross-backend"), jc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
