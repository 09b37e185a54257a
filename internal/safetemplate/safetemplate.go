// Package safetemplate runs the Go text/templates a Project's author writes (the tracker's
// promptTemplate, the reactions' messages) with bounds on what one can make the manager do.
//
// A template is a program, and the manager runs it for every session of the Project, so a
// 130-byte template must not be able to allocate hundreds of MiB or loop forever. Parse
// refuses, with a message that says what to write instead:
//
//   - {{define}}, {{template}} and {{block}}: no template calls another, so there is no recursion
//     and no fan-out of calls;
//   - {{range}} over anything but the data's own lists and maps (.Checks, $.Issue.Labels, $x
//     holding one), which whoever builds the data bounds: a literal (range 9223372036854775807),
//     a number of the data (range .PullRequest.Number), a function's result or a parenthesised
//     pipeline could be made arbitrarily large;
//   - ranges nested deeper than MaxRangeDepth, and templates of more than MaxNodes nodes;
//   - the builtin call (it would run any function value the data held).
//
// It replaces printf with one that refuses widths and precisions above MaxWidth (printf
// "%0999999999d" would allocate a GiB before anything is written) and '*' widths. Execute then
// bounds the output (MaxOutput bytes: the writer refuses more) and the time (a render that takes
// longer than the timeout is abandoned with ErrTimeout; with the static bounds above none should).
package safetemplate

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
	"time"
)

// Bounds.
const (
	// MaxRangeDepth bounds nested ranges: the data's lists are bounded, their product must be.
	MaxRangeDepth = 2
	// MaxNodes bounds a template's parse tree.
	MaxNodes = 4096
	// MaxWidth bounds a printf width or precision.
	MaxWidth = 256
	// DefaultTimeout bounds one render.
	DefaultTimeout = time.Second
)

// ErrRefused is wrapped by every error of Parse that is a bound, not a syntax error.
var ErrRefused = errors.New("template refused")

// ErrTimeout is returned by Execute for a render that outlived its timeout.
var ErrTimeout = errors.New("template took too long to render")

// ErrTooLong is returned by Execute for an output above its bound.
var ErrTooLong = errors.New("template output too long")

// Parse parses text as a template named name with funcs (which may not be called "call" or
// "printf": those are the package's), and checks it against the bounds. data is the type of the
// value the template will be executed with: a range must go over one of its lists or maps, never
// over a number (range .PullRequest.Number, nested twice, would run for hours).
func Parse(name, text string, funcs template.FuncMap, data reflect.Type) (*template.Template, error) {
	fm := template.FuncMap{"printf": printf, "call": refusedCall}
	for k, v := range funcs {
		if _, taken := fm[k]; taken {
			return nil, fmt.Errorf("safetemplate: function %q is the package's", k)
		}
		fm[k] = v
	}
	t, err := template.New(name).Option("missingkey=error").Funcs(fm).Parse(text)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("%w: {{define}} and {{block}} are not allowed: write the text in one template", ErrRefused)
	}
	if t.Tree == nil || t.Root == nil {
		return t, nil
	}
	c := &checker{root: data}
	c.node(t.Root, scope{dot: data, vars: map[string]reflect.Type{"$": data}}, 0)
	if c.err != nil {
		return nil, c.err
	}
	return t, nil
}

type checker struct {
	root  reflect.Type
	nodes int
	err   error
}

// scope is what the checker knows where a node is: the type of dot and of each variable (nil:
// unknown).
type scope struct {
	dot  reflect.Type
	vars map[string]reflect.Type
}

func (s scope) with(dot reflect.Type) scope {
	vars := make(map[string]reflect.Type, len(s.vars))
	for k, v := range s.vars {
		vars[k] = v
	}
	return scope{dot: dot, vars: vars}
}

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
	}
}

func (c *checker) node(n parse.Node, sc scope, ranges int) {
	if c.err != nil || n == nil {
		return
	}
	c.nodes++
	if c.nodes > MaxNodes {
		c.fail("more than %d template nodes: shorten the template", MaxNodes)
		return
	}
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, x := range n.Nodes {
			c.node(x, sc, ranges)
		}
	case *parse.ActionNode:
		c.pipe(n.Pipe, sc)
	case *parse.IfNode:
		c.pipe(n.Pipe, sc)
		c.node(n.List, sc, ranges)
		c.node(n.ElseList, sc, ranges)
	case *parse.WithNode:
		inner := sc.with(c.pipeType(n.Pipe, sc))
		c.pipe(n.Pipe, inner)
		c.node(n.List, inner, ranges)
		c.node(n.ElseList, sc, ranges)
	case *parse.RangeNode:
		if ranges+1 > MaxRangeDepth {
			c.fail("ranges nested more than %d deep: flatten the template", MaxRangeDepth)
			return
		}
		over := c.pipeType(n.Pipe, sc)
		for over != nil && over.Kind() == reflect.Pointer {
			over = over.Elem()
		}
		if over == nil {
			// A literal, a function's result, a parenthesised pipeline, or a name the checker
			// cannot follow through the data's type.
			c.fail("{{range %s}}: range over the data's own lists only (for example {{range .Checks}})", n.Pipe)
			return
		}
		var key, elem reflect.Type
		switch over.Kind() {
		case reflect.Slice, reflect.Array:
			key, elem = reflect.TypeFor[int](), over.Elem()
		case reflect.Map:
			key, elem = over.Key(), over.Elem()
		default:
			c.fail("{{range %s}}: it is a %s, not a list: range over the data's own lists only (for example {{range .Checks}})", n.Pipe, over.Kind())
			return
		}
		inner := sc.with(elem)
		switch len(n.Pipe.Decl) {
		case 1:
			inner.vars[n.Pipe.Decl[0].Ident[0]] = elem
		case 2:
			inner.vars[n.Pipe.Decl[0].Ident[0]], inner.vars[n.Pipe.Decl[1].Ident[0]] = key, elem
		}
		c.count(n.Pipe) // its variables are the range's, declared above
		c.node(n.List, inner, ranges+1)
		c.node(n.ElseList, sc, ranges)
	case *parse.TemplateNode:
		c.fail("{{template %q}} is not allowed: write the text in one template", n.Name)
	case *parse.TextNode, *parse.CommentNode, *parse.BreakNode, *parse.ContinueNode:
	default:
		c.fail("unexpected template node %s", n)
	}
}

// count counts a pipeline's nodes.
func (c *checker) count(p *parse.PipeNode) {
	if p == nil {
		return
	}
	for _, cmd := range p.Cmds {
		for _, arg := range cmd.Args {
			c.nodes++
			if sub, ok := arg.(*parse.PipeNode); ok {
				c.count(sub)
			}
		}
	}
}

// pipe counts a pipeline's nodes and records the variables it declares ({{$x := .Checks}}).
func (c *checker) pipe(p *parse.PipeNode, sc scope) {
	if p == nil {
		return
	}
	c.count(p)
	if !p.IsAssign && len(p.Decl) == 1 {
		// A declaration outside range: the variable holds the pipeline's value from here on.
		sc.vars[p.Decl[0].Ident[0]] = c.pipeType(p, sc)
	} else if p.IsAssign && len(p.Decl) == 1 {
		// An assignment may change the variable's type: unknown from here on.
		sc.vars[p.Decl[0].Ident[0]] = nil
	}
}

// pipeType is the type of a pipeline that is one field, variable or chain of fields; nil when
// the checker cannot tell.
func (c *checker) pipeType(p *parse.PipeNode, sc scope) reflect.Type {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return nil
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.DotNode:
		return sc.dot
	case *parse.FieldNode:
		return fieldType(sc.dot, a.Ident)
	case *parse.VariableNode:
		return fieldType(sc.vars[a.Ident[0]], a.Ident[1:])
	case *parse.ChainNode:
		switch base := a.Node.(type) {
		case *parse.FieldNode:
			return fieldType(fieldType(sc.dot, base.Ident), a.Field)
		case *parse.VariableNode:
			return fieldType(fieldType(sc.vars[base.Ident[0]], base.Ident[1:]), a.Field)
		}
	}
	return nil
}

// fieldType follows names through structs (exported fields) and string-keyed maps.
func fieldType(t reflect.Type, names []string) reflect.Type {
	for _, name := range names {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil {
			return nil
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := t.FieldByName(name)
			if !ok || !f.IsExported() {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
	}
	return t
}

// printf is fmt.Sprintf without unbounded widths and precisions.
func printf(format string, args ...any) (string, error) {
	if err := checkFormat(format); err != nil {
		return "", err
	}
	return fmt.Sprintf(format, args...), nil
}

// checkFormat refuses '*' and numbers above MaxWidth in a format's verbs.
func checkFormat(f string) error {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		n := 0
		for ; i < len(f); i++ {
			ch := f[i]
			switch {
			case ch >= '0' && ch <= '9':
				n = n*10 + int(ch-'0')
				if n > MaxWidth {
					return fmt.Errorf("printf %q: widths and precisions above %d are not allowed", f, MaxWidth)
				}
				continue
			case ch == '.':
				n = 0
				continue
			case ch == '*':
				return fmt.Errorf("printf %q: '*' widths are not allowed", f)
			case strings.IndexByte("+-# [", ch) >= 0:
				continue
			case ch == ']':
				n = 0
				continue
			}
			break
		}
	}
	return nil
}

func refusedCall(any, ...any) (any, error) {
	return nil, errors.New("call is not allowed in Shepherd templates")
}

// Execute renders t with data into at most maxOutput bytes, within timeout (DefaultTimeout when
// zero). An output that would be longer stops the render with ErrTooLong, and the text returned
// with it is the first maxOutput bytes (a caller may clip it).
func Execute(t *template.Template, data any, maxOutput int, timeout time.Duration) (string, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		w := &limitedBuffer{limit: maxOutput}
		err := t.Execute(w, data)
		done <- result{w.String(), err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if errors.Is(r.err, ErrTooLong) {
			return r.text, fmt.Errorf("%w: more than %d bytes", ErrTooLong, maxOutput)
		}
		return r.text, r.err
	case <-timer.C:
		return "", fmt.Errorf("%w (%s)", ErrTimeout, timeout)
	}
}

// limitedBuffer refuses to grow past limit.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		n, _ := b.Buffer.Write(p[:b.limit-b.Len()])
		return n, ErrTooLong
	}
	return b.Buffer.Write(p)
}

// verdicts remembers checks by template text (Checked): a Project's templates are checked when it
// reconciles and the sessions resolve them on every reconcile, and a text's verdict does not
// change. Emptied when it holds maxVerdicts texts.
var verdicts = struct {
	sync.Mutex
	m map[string]error
}{m: map[string]error{}}

const maxVerdicts = 1024

// Checked returns check's verdict on key (a template text and what it is for), running check
// only for a key it has not seen.
func Checked(key string, check func() error) error {
	verdicts.Lock()
	err, ok := verdicts.m[key]
	verdicts.Unlock()
	if ok {
		return err
	}
	err = check()
	verdicts.Lock()
	defer verdicts.Unlock()
	if len(verdicts.m) >= maxVerdicts {
		verdicts.m = map[string]error{}
	}
	verdicts.m[key] = err
	return err
}
