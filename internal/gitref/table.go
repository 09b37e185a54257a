package gitref

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed testdata/branches.txt
var branchesTable []byte

// Case is one row of the shared branch-name table.
type Case struct {
	Name    string
	Valid   bool
	Message string // a fragment of the CEL message an invalid name gets
}

// Cases returns the shared table of valid and invalid branch names. It is exported so that the
// CRD validation suite (test/validation) checks the CEL rules against exactly the same rows.
func Cases() ([]Case, error) {
	var out []Case
	sc := bufio.NewScanner(bytes.NewReader(branchesTable))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) < 2 {
			return nil, fmt.Errorf("branches.txt:%d: want at least 2 tab-separated columns", line)
		}
		name, err := strconv.Unquote(`"` + strings.ReplaceAll(cols[1], `"`, `\"`) + `"`)
		if err != nil {
			return nil, fmt.Errorf("branches.txt:%d: %w", line, err)
		}
		c := Case{Name: name, Valid: cols[0] == "valid"}
		if !c.Valid {
			if len(cols) < 3 {
				return nil, fmt.Errorf("branches.txt:%d: an invalid case needs the expected message", line)
			}
			c.Message = cols[2]
		}
		out = append(out, c)
	}
	return out, sc.Err()
}
