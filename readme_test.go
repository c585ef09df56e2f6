package redq

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's Go snippets are cut from Example functions, so that every
// snippet compiles and runs (go test runs Examples and checks their
// output). A ```go block must follow a line
//
//	<!-- snippet: ExampleName -->
//
// (or "<!-- snippet: dir.ExampleName -->" for an Example of the package in
// one of snippetDirs: the dashboard and the Prometheus module)
// and hold exactly the lines of that Example between its "// readme:start"
// and "// readme:end" comments (its whole body when it has none), with
// their common indentation removed. go test -run TestReadmeSnippets
// -update-readme rewrites the blocks from the Examples.
var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's snippets from the Example functions they name")

var (
	snippetMarker = regexp.MustCompile(`^\s*<!-- snippet: (\S+) -->\s*$`)
	fenceOpen     = regexp.MustCompile("^(\\s*)```(\\w*)\\s*$")
)

// snippetDirs are the directories besides the root whose Examples the
// README may cut snippets from; their tests run them (CI runs the
// Prometheus module's tests in that module).
var snippetDirs = []string{"dashboard", "redqprom"}

func TestReadmeSnippets(t *testing.T) {
	examples, err := loadExamples(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range snippetDirs {
		more, err := loadExamples(dir)
		if err != nil {
			t.Fatal(err)
		}
		for name, ex := range more {
			examples[dir+"."+name] = ex
		}
	}
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	out, problems := checkSnippets(string(raw), examples)
	for _, p := range problems {
		t.Error(p)
	}
	if *updateReadme && out != string(raw) {
		if err := os.WriteFile("README.md", []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("README.md: snippets rewritten from the Examples")
	}
}

// A snippet check must fail on a block without a marker, a marker naming
// no Example, an Example without output, and a block that differs.
func TestReadmeSnippetsCheckFails(t *testing.T) {
	examples := map[string]example{
		"ExampleGood":     {region: "x := 1\nfmt.Println(x)", hasOutput: true},
		"ExampleNoOutput": {region: "x := 1"},
	}
	good := "<!-- snippet: ExampleGood -->\n```go\nx := 1\nfmt.Println(x)\n```\n"
	if _, problems := checkSnippets(good, examples); len(problems) != 0 {
		t.Fatalf("a matching snippet: %v", problems)
	}
	indented := "- a list item:\n\n  <!-- snippet: ExampleGood -->\n  ```go\n  x := 1\n  fmt.Println(x)\n  ```\n"
	if _, problems := checkSnippets(indented, examples); len(problems) != 0 {
		t.Fatalf("an indented snippet: %v", problems)
	}
	for name, text := range map[string]string{
		"no marker":      "```go\nx := 1\n```\n",
		"missing":        "<!-- snippet: ExampleGone -->\n```go\nx := 1\n```\n",
		"not an Example": "<!-- snippet: TestThing -->\n```go\nx := 1\n```\n",
		"no output":      "<!-- snippet: ExampleNoOutput -->\n```go\nx := 1\n```\n",
		"differs":        "<!-- snippet: ExampleGood -->\n```go\nx := 2\nfmt.Println(x)\n```\n",
		"dangling":       "<!-- snippet: ExampleGood -->\n\nprose\n",
		"unclosed":       "<!-- snippet: ExampleGood -->\n```go\nx := 1\n",
	} {
		if _, problems := checkSnippets(text, examples); len(problems) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
	fixed, _ := checkSnippets("<!-- snippet: ExampleGood -->\n```go\nstale\n```\n", examples)
	if fixed != good {
		t.Errorf("rewritten:\n%s\nwant:\n%s", fixed, good)
	}
}

// example is what a README snippet may be cut from.
type example struct {
	region    string // the snippet text, without common indentation
	hasOutput bool   // go test runs it and checks its output
}

// loadExamples reads every Example function of the package's test files
// in dir (both the package and its _test package).
func loadExamples(dir string) (map[string]example, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	out := map[string]example{}
	for _, path := range paths {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		withOutput := map[string]bool{}
		for _, ex := range doc.Examples(f) {
			withOutput["Example"+ex.Name] = ex.Output != "" || ex.EmptyOutput
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			region, err := snippetRegion(body)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, fn.Name.Name, err)
			}
			out[fn.Name.Name] = example{region: region, hasOutput: withOutput[fn.Name.Name]}
		}
	}
	return out, nil
}

// snippetRegion returns the lines of body between "// readme:start" and
// "// readme:end", or all of body but its output comment when it has no
// such lines, without their common indentation.
func snippetRegion(body string) (string, error) {
	lines := strings.Split(strings.Trim(body, "\n"), "\n")
	start, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case "// readme:start":
			if start >= 0 {
				return "", fmt.Errorf("two readme:start lines")
			}
			start = i
		case "// readme:end":
			if end >= 0 {
				return "", fmt.Errorf("two readme:end lines")
			}
			end = i
		}
	}
	switch {
	case start < 0 && end < 0:
		for i, l := range lines {
			if t := strings.TrimSpace(l); strings.HasPrefix(t, "// Output:") || strings.HasPrefix(t, "// Unordered output:") {
				lines = lines[:i]
				break
			}
		}
	case start < 0 || end < start:
		return "", fmt.Errorf("readme:start and readme:end do not make a region")
	default:
		lines = lines[start+1 : end]
	}
	return dedent(lines), nil
}

// dedent removes the leading tabs all non-empty lines share, and trailing
// blank lines.
func dedent(lines []string) string {
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if common < 0 || n < common {
			common = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		out[i] = l[common:]
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}

// checkSnippets checks every ```go block of readme against the Example its
// marker names, and returns readme with each block rewritten from its
// Example (where the Example exists) and the problems found.
func checkSnippets(readme string, examples map[string]example) (string, []string) {
	lines := strings.Split(readme, "\n")
	var out, problems []string
	marker := ""    // the Example named by a marker not yet used
	markerLine := 0 // its line number
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := snippetMarker.FindStringSubmatch(l); m != nil {
			if marker != "" {
				problems = append(problems, fmt.Sprintf("README.md:%d: snippet marker for %s has no ```go block after it", markerLine, marker))
			}
			marker, markerLine = m[1], i+1
			out = append(out, l)
			continue
		}
		fence := fenceOpen.FindStringSubmatch(l)
		if fence == nil {
			if marker != "" && strings.TrimSpace(l) != "" {
				problems = append(problems, fmt.Sprintf("README.md:%d: snippet marker for %s is not followed by a ```go block", markerLine, marker))
				marker = ""
			}
			out = append(out, l)
			continue
		}
		// A fenced block: find its end.
		indent, lang := fence[1], fence[2]
		end := -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				end = j
				break
			}
		}
		if end < 0 {
			problems = append(problems, fmt.Sprintf("README.md:%d: the ``` block is not closed", i+1))
			out = append(out, lines[i:]...)
			break
		}
		block := lines[i+1 : end]
		if lang != "go" {
			out = append(out, lines[i:end+1]...)
			i = end
			continue
		}
		name := marker
		marker = ""
		if name == "" {
			problems = append(problems, fmt.Sprintf("README.md:%d: a ```go block without a <!-- snippet: ExampleName --> line before it", i+1))
			out = append(out, lines[i:end+1]...)
			i = end
			continue
		}
		ex, ok := examples[name]
		switch {
		case !strings.HasPrefix(name[strings.LastIndex(name, ".")+1:], "Example"):
			problems = append(problems, fmt.Sprintf("README.md:%d: snippet names %s, which is not an Example function", i+1, name))
		case !ok:
			problems = append(problems, fmt.Sprintf("README.md:%d: snippet names %s, which no _test.go file defines", i+1, name))
		case !ex.hasOutput:
			problems = append(problems, fmt.Sprintf("README.md:%d: %s has no // Output: comment, so go test does not run it", i+1, name))
		}
		got := make([]string, len(block))
		for k, b := range block {
			got[k] = strings.TrimPrefix(b, indent)
		}
		if ok && strings.Join(got, "\n") != ex.region {
			problems = append(problems, fmt.Sprintf("README.md:%d: the snippet differs from %s's region; go test -run TestReadmeSnippets -update-readme rewrites it. Want:\n%s", i+1, name, ex.region))
		}
		out = append(out, l)
		if ok {
			for _, r := range strings.Split(ex.region, "\n") {
				if r == "" {
					out = append(out, "")
				} else {
					out = append(out, indent+r)
				}
			}
		} else {
			out = append(out, block...)
		}
		out = append(out, lines[end])
		i = end
	}
	if marker != "" {
		problems = append(problems, fmt.Sprintf("README.md:%d: snippet marker for %s has no ```go block after it", markerLine, marker))
	}
	return strings.Join(out, "\n"), problems
}
