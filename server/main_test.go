package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"audioproof-server": func() {
			if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
				fmt.Fprintf(os.Stderr, "audioproof server failed: %v\n", err)
				os.Exit(1)
			}
			os.Exit(0)
		},
	})
}

// ggmlDir is the repository's fetched CPU ggml folder, if `make deps` ran.
func ggmlDir() string {
	wd, _ := os.Getwd()
	for _, sub := range []string{"vulkan", "cpu"} {
		d := filepath.Join(wd, "..", ".deps", "ggml", sub)
		if _, err := os.Stat(filepath.Join(d, "libggml-base.so")); err == nil {
			return d
		}
	}
	return ""
}

func TestScripts(t *testing.T) {
	dir := ggmlDir()
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("AUDIOPROOF_GGML_DIR", dir)
			env.Setenv("HOME", env.WorkDir)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			env.Setenv("PORT", fmt.Sprint(port))
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "ggml" {
				return dir != "", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// waitserver URL: poll until the URL answers (10 s).
			"waitserver": func(ts *testscript.TestScript, neg bool, args []string) {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					if resp, err := http.Get(args[0]); err == nil {
						resp.Body.Close()
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				ts.Fatalf("server at %s never answered", args[0])
			},
			// http METHOD URL [BODY]: request; the status and body go to stdout.
			"http": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: http METHOD URL [BODY]")
				}
				var body io.Reader
				if len(args) > 2 {
					body = strings.NewReader(args[2])
				}
				req, err := http.NewRequest(args[0], args[1], body)
				ts.Check(err)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				ts.Check(err)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				fmt.Fprintf(ts.Stdout(), "%d %s\n", resp.StatusCode, b)
			},
		},
	})
}
