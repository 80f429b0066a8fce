package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gavv/httpexpect/v2"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/audioproof/audioproof/boundaries/report"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"boundaries": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs boundaries/testdata/script/*.txtar: each builds real git
// repositories with git and checks the tool's verdicts, exit codes and reports.
func TestScripts(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("the scripts build repositories with git, which is not installed")
	}
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: os.Getenv("TESTSCRIPT_UPDATE") != "",
		Setup: func(env *testscript.Env) error {
			// Isolate git from the machine's configuration.
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("XDG_CONFIG_HOME", env.WorkDir+"/.config")
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			env.Setenv("GIT_AUTHOR_NAME", "Boundary Test")
			env.Setenv("GIT_AUTHOR_EMAIL", "test@example.invalid")
			env.Setenv("GIT_COMMITTER_NAME", "Boundary Test")
			env.Setenv("GIT_COMMITTER_EMAIL", "test@example.invalid")
			env.Setenv("GIT_CONFIG_COUNT", "3")
			env.Setenv("GIT_CONFIG_KEY_0", "init.defaultBranch")
			env.Setenv("GIT_CONFIG_VALUE_0", "main")
			env.Setenv("GIT_CONFIG_KEY_1", "protocol.file.allow")
			env.Setenv("GIT_CONFIG_VALUE_1", "always")
			env.Setenv("GIT_CONFIG_KEY_2", "core.autocrlf")
			env.Setenv("GIT_CONFIG_VALUE_2", "false")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"jsonfield":  cmdJSONField,
			"junitcheck": cmdJUnitCheck,
			"crlf":       cmdCRLF,
			"setenvfile": cmdSetenvFile,
			"status":     cmdStatus,
			"validjson":  cmdValidJSON,
			"validjunit": cmdValidJUnit,
		},
	})
}

// cmdJSONField prints the JSON value at a dotted path (numbers index arrays):
// jsonfield FILE base.commit
func cmdJSONField(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: jsonfield FILE PATH")
	}
	var v any
	if err := json.Unmarshal([]byte(ts.ReadFile(args[0])), &v); err != nil {
		ts.Fatalf("%s is not valid JSON: %v", args[0], err)
	}
	for _, key := range strings.Split(args[1], ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[key]; !ok {
				ts.Fatalf("%s: no key %q at %s", args[0], key, args[1])
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(x) {
				ts.Fatalf("%s: bad index %q (length %d) at %s", args[0], key, len(x), args[1])
			}
			v = x[i]
		default:
			ts.Fatalf("%s: %q is below a scalar at %s", args[0], key, args[1])
		}
	}
	out, _ := json.Marshal(v)
	fmt.Fprintln(ts.Stdout(), string(out))
}

type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Type    string `xml:"type,attr"`
				Body    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// cmdJUnitCheck validates a JUnit file's structure and counts, then prints
// one line per test case: "pass NAME" or "fail NAME TYPE".
func cmdJUnitCheck(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: junitcheck FILE")
	}
	var doc junitDoc
	if err := xml.Unmarshal([]byte(ts.ReadFile(args[0])), &doc); err != nil {
		ts.Fatalf("%s is not JUnit XML: %v", args[0], err)
	}
	tests, failures := 0, 0
	for _, s := range doc.Suites {
		fails := 0
		for _, c := range s.Cases {
			if c.Name == "" || c.Classname == "" {
				ts.Fatalf("test case without name or classname in %s", args[0])
			}
			if c.Failure != nil {
				if c.Failure.Message == "" || c.Failure.Type == "" || c.Failure.Body == "" {
					ts.Fatalf("failure of %s lacks message, type or body", c.Name)
				}
				fails++
				fmt.Fprintf(ts.Stdout(), "fail %s %s\n", c.Name, c.Failure.Type)
			} else {
				fmt.Fprintf(ts.Stdout(), "pass %s\n", c.Name)
			}
		}
		if s.Tests != len(s.Cases) || s.Failures != fails {
			ts.Fatalf("suite %s counts tests=%d failures=%d, but has %d cases, %d failing", s.Name, s.Tests, s.Failures, len(s.Cases), fails)
		}
		tests += s.Tests
		failures += s.Failures
	}
	if doc.Tests != tests || doc.Failures != failures {
		ts.Fatalf("testsuites counts tests=%d failures=%d, suites add up to %d/%d", doc.Tests, doc.Failures, tests, failures)
	}
}

// cmdCRLF rewrites files with CRLF line endings: crlf FILE...
func cmdCRLF(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: crlf FILE...")
	}
	for _, f := range args {
		s := strings.ReplaceAll(ts.ReadFile(f), "\r\n", "\n")
		if err := os.WriteFile(ts.MkAbs(f), []byte(strings.ReplaceAll(s, "\n", "\r\n")), 0o644); err != nil {
			ts.Fatalf("%v", err)
		}
	}
}

// cmdSetenvFile sets VAR to FILE's trimmed content: setenvfile VAR FILE
func cmdSetenvFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: setenvfile VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}

// scriptEnv lists the variables the scripts set or rely on.
var scriptEnv = []string{"PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR", "WORK",
	"GIT_CONFIG_NOSYSTEM", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
	"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_1",
	"GIT_CONFIG_KEY_2", "GIT_CONFIG_VALUE_2"}

// cmdStatus runs boundaries and checks its exit status exactly:
// status 2 --base nosuch
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: status CODE [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: bad exit code %q", args[0])
	}
	var bin string
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(dir, "boundaries")); err == nil && !fi.IsDir() {
			bin = filepath.Join(dir, "boundaries")
			break
		}
	}
	if bin == "" {
		ts.Fatalf("status: boundaries is not in $PATH")
	}
	cmd := exec.Command(bin, args[1:]...)
	cmd.Dir = ts.MkAbs(".")
	for _, k := range scriptEnv {
		cmd.Env = append(cmd.Env, k+"="+ts.Getenv(k))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ts.Stdout().Write(stdout.Bytes())
	ts.Stderr().Write(stderr.Bytes())
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("status: run boundaries: %v", err)
	}
	if got != want {
		ts.Fatalf("boundaries exited with status %d, want %d\nstdout:\n%s\nstderr:\n%s", got, want, stdout.String(), stderr.String())
	}
}

type scriptReporter struct{ ts *testscript.TestScript }

func (r scriptReporter) Errorf(format string, args ...any) { r.ts.Fatalf(format, args...) }

// cmdValidJSON validates a JSON report against report.JSONSchema: validjson FILE
func cmdValidJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: validjson FILE")
	}
	var doc any
	if err := json.Unmarshal([]byte(ts.ReadFile(args[0])), &doc); err != nil {
		ts.Fatalf("%s is not JSON: %v", args[0], err)
	}
	httpexpect.NewValue(scriptReporter{ts}, doc).Schema(string(report.JSONSchema))
}

// cmdValidJUnit validates a JUnit report against report.JUnitXSD with
// xmllint, when it is installed: validjunit FILE
func cmdValidJUnit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: validjunit FILE")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		ts.Logf("xmllint not installed: schema validation skipped")
		return
	}
	xsd := ts.MkAbs("junit.xsd")
	if err := os.WriteFile(xsd, report.JUnitXSD, 0o644); err != nil {
		ts.Fatalf("%v", err)
	}
	out, err := exec.Command("xmllint", "--noout", "--schema", xsd, ts.MkAbs(args[0])).CombinedOutput()
	if err != nil {
		ts.Fatalf("%s does not match the JUnit schema: %v\n%s", args[0], err, out)
	}
}
