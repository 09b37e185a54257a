// Package gitproxy forwards git's smart-HTTP protocol to a repository on the caller's behalf,
// adding credentials the caller never sees and refusing pushes to any ref but the one allowed.
//
// It serves two hops of Shepherd's git path: in the agent pod the runner serves it on loopback,
// so the agent's `git push origin` reaches the manager with the runner's token; in the manager
// it forwards to the forge with the Project's credentials. Both hops check the pushed refs, so a
// runner that was subverted still cannot push anywhere but its session's branch.
package gitproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"
)

// pkt-line limits (git's own: LARGE_PACKET_MAX is 65520 including the 4-byte header).
const (
	maxPktLen = 65520
	// maxCommands bounds the command list of one push; git sends one line per ref.
	maxCommands = 1000
)

// RefUpdate is one command of a push: move Ref from Old to New. A New of all zeros deletes.
type RefUpdate struct {
	Old, New, Ref string
}

// Deletes reports whether the update deletes its ref.
func (u RefUpdate) Deletes() bool { return isZeroID(u.New) }

// ErrProtocol is returned for a request that is not a well-formed receive-pack command list.
var ErrProtocol = errors.New("malformed git request")

// readPkt reads one pkt-line. It returns the payload, or flush=true for "0000". Delimiter and
// response-end packets ("0001", "0002") are protocol v2 only and refused here.
func readPkt(r *bufio.Reader, raw *bytes.Buffer) (payload []byte, flush bool, err error) {
	var hdr [4]byte
	n0, err := io.ReadFull(r, hdr[:])
	raw.Write(hdr[:n0])
	if err != nil {
		return nil, false, fmt.Errorf("%w: reading a pkt-line header: %w", ErrProtocol, err)
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return nil, false, fmt.Errorf("%w: pkt-line header %q is not hex", ErrProtocol, hdr[:])
	}
	switch {
	case n == 0:
		return nil, true, nil
	case n < 4 || n > maxPktLen:
		return nil, false, fmt.Errorf("%w: pkt-line length %d", ErrProtocol, n)
	}
	payload = make([]byte, n-4)
	n1, err := io.ReadFull(r, payload)
	raw.Write(payload[:n1])
	if err != nil {
		return nil, false, fmt.Errorf("%w: short pkt-line: %w", ErrProtocol, err)
	}
	return payload, false, nil
}

// ReadCommands reads the command list that opens a receive-pack request (shallow lines, then
// "<old> <new> <ref>[\0<capabilities>]" lines, then a flush), and returns the commands, the
// capabilities of the first line, and every byte it consumed, so that the caller can forward
// the request unchanged. A signed push (push-cert) is refused: Shepherd's pushes are not signed,
// and its certificate block would hide commands from this check.
func ReadCommands(r *bufio.Reader) (cmds []RefUpdate, caps []string, raw []byte, err error) {
	var buf bytes.Buffer
	for {
		payload, flush, err := readPkt(r, &buf)
		if err != nil {
			return nil, nil, nil, err
		}
		if flush {
			break
		}
		line := strings.TrimSuffix(string(payload), "\n")
		if strings.HasPrefix(line, "shallow ") {
			continue
		}
		if strings.HasPrefix(line, "push-cert") {
			return nil, nil, nil, fmt.Errorf("%w: signed pushes are not accepted", ErrProtocol)
		}
		if len(cmds) == 0 {
			if i := strings.IndexByte(line, 0); i >= 0 {
				caps = strings.Fields(line[i+1:])
				line = line[:i]
			}
		}
		u, err := parseCommand(line)
		if err != nil {
			return nil, nil, nil, err
		}
		if cmds = append(cmds, u); len(cmds) > maxCommands {
			return nil, nil, nil, fmt.Errorf("%w: more than %d ref updates in one push", ErrProtocol, maxCommands)
		}
	}
	if len(cmds) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: a push with no ref updates", ErrProtocol)
	}
	return cmds, caps, buf.Bytes(), nil
}

func parseCommand(line string) (RefUpdate, error) {
	f := strings.Split(line, " ")
	if len(f) != 3 || !isObjectID(f[0]) || !isObjectID(f[1]) || len(f[0]) != len(f[1]) || f[2] == "" {
		return RefUpdate{}, fmt.Errorf("%w: ref update %q", ErrProtocol, clip.Marked(line, 200, "…"))
	}
	return RefUpdate{Old: f[0], New: f[1], Ref: f[2]}, nil
}

// isObjectID accepts SHA-1 and SHA-256 object names in lower-case hex.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isZeroID(s string) bool { return strings.Trim(s, "0") == "" }

func writePktTo(w *bytes.Buffer, payload []byte, flush bool) {
	if flush {
		w.WriteString("0000")
		return
	}
	fmt.Fprintf(w, "%04x", len(payload)+4)
	w.Write(payload)
}

// refusal is a receive-pack answer that refuses every command with msg, in the report-status
// format git prints as "! [remote rejected] <ref> (<msg>)". With side-band capabilities the
// report travels on band 1, as git expects when it asked for them.
func refusal(cmds []RefUpdate, caps []string, msg string) []byte {
	var report bytes.Buffer
	writePktTo(&report, []byte("unpack ok\n"), false)
	for _, c := range cmds {
		writePktTo(&report, []byte("ng "+c.Ref+" "+msg+"\n"), false)
	}
	writePktTo(&report, nil, true)
	sideband := false
	for _, c := range caps {
		if c == "side-band-64k" || c == "side-band" {
			sideband = true
		}
	}
	if !sideband {
		return report.Bytes()
	}
	var out bytes.Buffer
	data := report.Bytes()
	for len(data) > 0 {
		n := min(len(data), 900) // within side-band's 1000-byte packets
		writePktTo(&out, append([]byte{1}, data[:n]...), false)
		data = data[n:]
	}
	writePktTo(&out, nil, true)
	return out.Bytes()
}
