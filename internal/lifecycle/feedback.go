package lifecycle

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// maxForwardedComments bounds the comments one message forwards: a burst of more says how many
// were left out (the pull request has them all), so that one message stays readable and within
// MaxMessageBytes.
const maxForwardedComments = 10

// maxMarkIDs bounds the ids a comment watermark lists for its newest instant (see commentMark).
const maxMarkIDs = 20

// commentMarkPrefix starts a commented reaction's key.
const commentMarkPrefix = "c:"

// sortedComments orders comments by time, then id: the order they are forwarded in, and the
// order the watermark is taken over.
func sortedComments(in []Comment) []Comment {
	out := append([]Comment(nil), in...)
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// commentMark is the watermark of what has been forwarded: the time of the newest comment and a
// short digest of each comment at exactly that time ("c:<unix nanoseconds>:<d1>.<d2>"). The
// conversation only grows, so every comment older than the mark was forwarded before, and the
// digests tell apart comments that share the newest instant (forges give seconds). The mark
// stays short however long the conversation: it lives in status.reactions[].lastAttemptKey, so a
// comment is forwarded once across manager restarts.
func commentMark(cs []Comment) string {
	if len(cs) == 0 {
		return ""
	}
	newest := cs[len(cs)-1].CreatedAt
	var ds []string
	for i := len(cs) - 1; i >= 0 && cs[i].CreatedAt.Equal(newest) && len(ds) < maxMarkIDs; i-- {
		ds = append(ds, hash(cs[i].ID)[:8])
	}
	sort.Strings(ds)
	return commentMarkPrefix + strconv.FormatInt(newest.UnixNano(), 10) + ":" + strings.Join(ds, ".")
}

// commentsAfter returns the comments the watermark last does not cover, oldest first. A key
// that is not a watermark (none yet) covers nothing.
func commentsAfter(cs []Comment, last string) []Comment {
	rest, ok := strings.CutPrefix(last, commentMarkPrefix)
	if !ok {
		return cs
	}
	ts, ids, _ := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return cs
	}
	mark := time.Unix(0, n)
	seen := map[string]bool{}
	for _, d := range strings.Split(ids, ".") {
		seen[d] = true
	}
	var out []Comment
	for _, c := range cs {
		switch {
		case c.CreatedAt.After(mark):
		case c.CreatedAt.Equal(mark) && !seen[hash(c.ID)[:8]]:
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// commentedView: the conversation's new comments (those past the watermark of the last attempt)
// are one attempt, each forwarded once. The trigger is inactive when nothing is new, so every
// burst of comments is its own episode: comments are not a failure to retry or escalate.
func (e *eval) commentedView(v *triggerView, prReady bool) {
	p := e.pr
	last := ""
	if st := e.reactions[agentsv1alpha1.TriggerCommented]; st != nil {
		last = st.LastAttemptKey
	}
	fresh := commentsAfter(p.comments, last)
	v.subject = fmt.Sprintf("%d new comment(s) on pull request %s.", len(fresh), p.ref())
	switch {
	case !prReady:
	case len(fresh) > 0:
		mark := commentMark(p.comments)
		v.state, v.episode = active, "comments"
		v.key = func(*agentsv1alpha1.ReactionStatus) string { return mark }
		v.isNew = func(last, _ string) bool { return len(commentsAfter(p.comments, last)) > 0 }
		v.data = func(last string) MessageData {
			d := e.messageData()
			cs := commentsAfter(p.comments, last)
			if len(cs) > maxForwardedComments {
				d.OmittedComments = len(cs) - maxForwardedComments
				cs = cs[len(cs)-maxForwardedComments:]
			}
			d.Comments = cs
			return d
		}
	default:
		v.state = inactive
	}
}

// requestOpeners start a sentence that is phrased as a question but asks for a change ("Could
// you rename this?"): such a comment is a request.
var requestOpeners = []string{
	"can you", "could you", "would you", "will you", "can we", "could we", "should we", "shall we",
	"please", "pls", "mind ", "would it be possible", "is it possible to",
}

// IsQuestion reports whether a comment asks the agent something rather than asking for a change:
// its last sentence (quoted lines, which start with ">", and fenced code left out) ends with a
// question mark and does not open as a polite request ("could you…?", "please…?"). "Why a
// map here?" is a question; "Could you use a slice here?" is a change request. A question is
// forwarded as one: the agent answers it and changes code only if the answer shows it should.
func IsQuestion(body string) bool {
	var lines []string
	fenced := false
	for _, l := range strings.Split(body, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || t == "" || strings.HasPrefix(t, ">") {
			continue
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return false
	}
	text := strings.Join(lines, " ")
	text = strings.TrimRightFunc(text, func(r rune) bool { return unicode.IsSpace(r) || r == ')' || r == '*' || r == '_' })
	if !strings.HasSuffix(text, "?") {
		return false
	}
	// The last sentence: after the last '.', '!' or '?' before the final one.
	body2 := strings.TrimSuffix(text, "?")
	if i := strings.LastIndexAny(body2, ".!?"); i >= 0 {
		body2 = body2[i+1:]
	}
	sentence := strings.ToLower(strings.TrimSpace(body2))
	sentence = strings.TrimLeft(sentence, "-*_ ")
	if strings.HasPrefix(sentence, "@") {
		// "@shepherd could you…": the mention is not the sentence.
		_, sentence, _ = strings.Cut(sentence, " ")
		sentence = strings.TrimSpace(sentence)
	}
	for _, o := range requestOpeners {
		if strings.HasPrefix(sentence, o) {
			return false
		}
	}
	return true
}

// CommandText returns a comment's text after prefix when the comment starts with it
// (case-insensitive, followed by whitespace or nothing); ok is false when it does not. An empty
// prefix takes every comment as it is.
func CommandText(body, prefix string) (text string, ok bool) {
	if prefix == "" {
		return body, true
	}
	t := strings.TrimLeftFunc(body, unicode.IsSpace)
	if len(t) < len(prefix) || !strings.EqualFold(t[:len(prefix)], prefix) {
		return "", false
	}
	rest := t[len(prefix):]
	if rest != "" && !unicode.IsSpace(rune(rest[0])) {
		return "", false // "/shepherdless" is not "/shepherd"
	}
	return strings.TrimSpace(rest), true
}
