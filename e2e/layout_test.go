package e2e

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The module path every internal import starts with.
const modulePath = "github.com/drover-ci/drover/"

// layoutRow is one row of docs/layout.md's table: the paths its first
// cell names, in the order of the table (top: the binary's wiring).
type layoutRow struct {
	line  int
	paths []string
}

// readLayout reads the table of docs/layout.md.
func readLayout(file string) ([]layoutRow, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tick := regexp.MustCompile("`([^`]+)`")
	var rows []layoutRow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line[1:], "|", 2)[0]
		row := layoutRow{line: n}
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			row.paths = append(row.paths, strings.TrimSuffix(m[1], "/"))
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}

// rowOf is the index of the row that holds package dir: the row naming
// the longest path that is dir or one of its parents, or a Go file in
// dir; -1 when none does.
func rowOf(rows []layoutRow, dir string) int {
	best, bestLen := -1, -1
	for i, r := range rows {
		for _, p := range r.paths {
			holds := dir == p || strings.HasPrefix(dir, p+"/") ||
				strings.HasSuffix(p, ".go") && path.Dir(p) == dir
			if holds && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// packageImports maps each directory of the module holding non-test Go
// files to the module's packages those files import (directories,
// relative to the module's root).
func packageImports(root string) (map[string][]string, error) {
	imports := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case file != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(file))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, ok := imports[rel]; !ok {
			imports[rel] = nil
		}
		for _, spec := range f.Imports {
			p := strings.Trim(spec.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(p, modulePath); ok && !slices.Contains(imports[rel], dep) {
				imports[rel] = append(imports[rel], dep)
			}
		}
		return nil
	})
	return imports, err
}

// TestLayoutImportsPointDown checks docs/layout.md against the code: every
// package of the module has a row in its table (its own or a parent's),
// and every import points down the table: a package imports only
// packages of its own row or of rows below it (issue 39: "a map of the
// packages that matches the import graph, with every arrow pointing
// down").
func TestLayoutImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readLayout(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 10 {
		t.Fatalf("docs/layout.md: %d table rows read, want the package table", len(rows))
	}
	imports, err := packageImports(root)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	dirs := make([]string, 0, len(imports))
	for dir := range imports {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		from := rowOf(rows, dir)
		if from < 0 {
			problems = append(problems, fmt.Sprintf("%s: no row of docs/layout.md names it or a parent", dir))
			continue
		}
		for _, dep := range imports[dir] {
			to := rowOf(rows, dep)
			if to >= 0 && to < from {
				problems = append(problems, fmt.Sprintf("%s (docs/layout.md:%d) imports %s, which stands above it (docs/layout.md:%d)",
					dir, rows[from].line, dep, rows[to].line))
			}
		}
	}
	for _, r := range rows {
		for _, p := range r.paths {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				problems = append(problems, fmt.Sprintf("docs/layout.md:%d names %s, which is not in the tree", r.line, p))
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("docs/layout.md and the import graph disagree:\n%s", strings.Join(problems, "\n"))
	}
}
