package redq

import (
	"strings"
	"testing"
)

// Every queue script gets the shared helpers it uses, and the ones those
// use, defined before its body; and not the ones it does not use.
func TestScriptsCarryTheHelpersTheyUse(t *testing.T) {
	lib := readScript("lib")
	var names []string
	for _, line := range strings.Split(lib, "\n") {
		if m := libDef.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	for _, name := range []string{"fetch", "settle", "ack", "fire_ack", "return_unacked", "return_rejected", "purge", "publish",
		"release", "touch", "reject_with", "maintain", "counts", "drain", "put", "upsert", "keyed_cancel",
		"keyed_run_now", "keyed_lookup"} {
		body := readScript(name)
		full := withHelpers(lib, body)
		if !strings.HasSuffix(full, body) {
			t.Fatalf("%s: body is not last", name)
		}
		defined := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSuffix(full, body), "\n") {
			if m := libDef.FindStringSubmatch(line); m != nil {
				defined[m[1]] = true
			}
		}
		code := luaComment.ReplaceAllString(full, "")
		used := map[string]bool{}
		for _, w := range luaWord.FindAllString(code, -1) {
			used[w] = true
		}
		for _, n := range names {
			if used[n] && !defined[n] && !strings.Contains(body, "local "+n+" ") && !strings.Contains(body, "local "+n+",") {
				t.Errorf("%s uses %s but does not define it", name, n)
			}
		}
	}
	if got := withHelpers(lib, "return IDLEN"); strings.Contains(got, "function expire_leases") || !strings.Contains(got, "local IDLEN") {
		t.Fatalf("a script using only IDLEN got:\n%s", got)
	}
}

// A script with a fast path defines at its top only the helpers the fast
// path uses; the full path's helpers are defined inside the function that
// runs it, so a call the fast path serves does not define them.
func TestFastPathDefinesOnlyItsHelpers(t *testing.T) {
	text := queueScriptText(readScript("lib"), readScript("fetch"))
	top, full, ok := strings.Cut(text, "local function full_path()\n")
	if !ok {
		t.Fatalf("fetch.lua's text has no full path function:\n%.300s", text)
	}
	for _, name := range []string{"expire_leases", "promote", "pop_ready", "keyed", "grouped", "queue_keys"} {
		if strings.Contains(top, "local function "+name+"(") {
			t.Errorf("%s is defined before the fast path", name)
		}
		if !strings.Contains(full, "local function "+name+"(") {
			t.Errorf("%s is not defined in the full path", name)
		}
	}
	if !strings.Contains(top, "local function take_plain(") || !strings.HasSuffix(text, "end\nreturn full_path()\n") {
		t.Fatalf("fetch.lua's text is not fast path, then the full path's function:\n%s", text)
	}
	// a script without a fast path is its helpers and its body, as before
	if got, want := queueScriptText(readScript("lib"), readScript("ack")), compact(withHelpers(readScript("lib"), readScript("ack"))); got != want {
		t.Fatalf("ack.lua's text changed:\n%s", got)
	}
}
