package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
)

// ErrTemplateBudgetExceeded says a KubeadmConfig's template would take more to render than
// CAPDMP spends on the templates of one bootstrap data.
var ErrTemplateBudgetExceeded = errors.New("the template exceeds the rendering budget")

const (
	// maxTemplateSteps bounds the work of rendering the templates of one bootstrap data, all its
	// files and every version tried together: a step is one node of a template evaluated once
	// (an action, a text, a command or argument of a pipeline), or templateBytesPerStep bytes a
	// function makes. A real template takes a few dozen steps a rendering, and a file is rendered
	// at most maxVersionCandidates+2 times; at about a microsecond a step, spending the whole
	// budget takes tens of milliseconds.
	maxTemplateSteps = 50_000
	// templateBytesPerStep is how many bytes of a string a function makes cost one step.
	templateBytesPerStep = 64
	// fmtMaxWidth is the largest width or precision fmt honours (it refuses larger ones).
	fmtMaxWidth = 1_000_000
	// spendFunc is the function each list of a parsed template calls first, with its cost.
	spendFunc = "capdmpSpend"
)

// templateBudget is what rendering the templates of one bootstrap data may spend. Go's
// text/template cannot be cancelled, and a template such as
// {{range 1000000}}{{range 1000000}}{{end}}{{end}} writes nothing for days, so neither a writer
// that refuses output past a limit nor a deadline around Execute stops it; running it in a
// goroutine that is abandoned would leave it spinning. The rendering pays as it goes instead:
// parse makes every list of the template (its body, each define, each branch of if, with and
// range) call spendFunc first with the cost of its nodes, so every iteration of a range and every
// template call pays before it runs; the functions that make strings longer refuse results past
// maxRenderedTemplateBytes and pay for what they make. Once the budget is spent, or the context
// of the reconcile is done, spendFunc fails and Execute returns. Steps rather than time, so that
// a template renders the same whatever the load, and Configuration does not change with it.
type templateBudget struct {
	// contextErr is the reconcile context's Err.
	contextErr func() error
	steps      int
	// stopped is why the budget stopped a rendering, once it did.
	stopped error
}

func newTemplateBudget(ctx context.Context) *templateBudget {
	return &templateBudget{contextErr: ctx.Err, steps: maxTemplateSteps}
}

// spend takes steps from the budget and fails once it is spent or the context is done.
func (b *templateBudget) spend(steps int) error {
	if err := b.contextErr(); err != nil {
		return b.stop(err)
	}
	b.steps -= max(steps, 1)
	if b.steps < 0 {
		return b.stop(fmt.Errorf("%w: rendering takes more than %d steps", ErrTemplateBudgetExceeded, maxTemplateSteps))
	}
	return nil
}

func (b *templateBudget) stop(err error) error {
	if b.stopped == nil {
		b.stopped = err
	}
	return err
}

// stoppedBy returns why the budget stopped the rendering that returned err, nil when the budget
// did not stop it (the template failed on its own). It says it in its own words rather than
// with the position in the metered template Execute adds.
func (b *templateBudget) stoppedBy(err error) error {
	switch {
	case b.stopped != nil:
		return b.stopped
	case errors.Is(err, ErrTemplateBudgetExceeded):
		// The limited writer: Execute returns its error as it is.
		return b.stop(err)
	}
	return nil
}

// parse parses tpl with the functions of the budget and makes each of its lists pay first.
func (b *templateBudget) parse(name, tpl string) (*template.Template, error) {
	t, err := template.New(name).Funcs(b.funcs()).Parse(tpl)
	if err != nil {
		return nil, err
	}
	for _, each := range t.Templates() {
		if each.Tree != nil {
			meter(each.Root)
		}
	}
	return t, nil
}

// meter puts a call of spendFunc, with the cost of the list's own nodes, at the start of list
// and of every list within it. The lists of a branch pay when they run, not with their node.
func meter(list *parse.ListNode) {
	if list == nil {
		return
	}
	steps := 1
	for _, node := range list.Nodes {
		steps += cost(node)
		var branch *parse.BranchNode
		switch n := node.(type) {
		case *parse.IfNode:
			branch = &n.BranchNode
		case *parse.RangeNode:
			branch = &n.BranchNode
		case *parse.WithNode:
			branch = &n.BranchNode
		}
		if branch != nil {
			meter(branch.List)
			meter(branch.ElseList)
		}
	}
	spend := &parse.ActionNode{NodeType: parse.NodeAction, Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Cmds: []*parse.CommandNode{{
		NodeType: parse.NodeCommand,
		Args: []parse.Node{
			parse.NewIdentifier(spendFunc),
			&parse.NumberNode{NodeType: parse.NodeNumber, IsInt: true, Int64: int64(steps), Text: strconv.Itoa(steps)},
		},
	}}}}
	list.Nodes = append([]parse.Node{spend}, list.Nodes...)
}

// cost is the number of nodes evaluating node once visits, its branches' lists aside.
func cost(node parse.Node) int {
	switch n := node.(type) {
	case *parse.ActionNode:
		return 1 + cost(n.Pipe)
	case *parse.IfNode:
		return 1 + cost(n.Pipe)
	case *parse.RangeNode:
		return 1 + cost(n.Pipe)
	case *parse.WithNode:
		return 1 + cost(n.Pipe)
	case *parse.TemplateNode:
		return 1 + cost(n.Pipe)
	case *parse.PipeNode:
		if n == nil {
			return 0
		}
		steps := len(n.Decl)
		for _, c := range n.Cmds {
			steps += cost(c)
		}
		return steps
	case *parse.CommandNode:
		steps := 1
		for _, arg := range n.Args {
			steps += cost(arg)
		}
		return steps
	case *parse.ChainNode:
		return len(n.Field) + cost(n.Node)
	case *parse.FieldNode:
		return len(n.Ident)
	case *parse.VariableNode:
		return len(n.Ident)
	}
	return 1
}

// funcs are spendFunc and, in place of the builtins that make strings longer (print, printf,
// println, html, js, urlquery), the same functions refusing a result longer than
// maxRenderedTemplateBytes and paying for what they make. They refuse before they make a string
// when what they are given could make more than 6 times that (escaping writes at most 6 bytes a
// byte: \u003C in js), so that no call makes much more than the limit. The other builtins
// (comparisons, index, slice, len, and, or, not, call) make no string longer than they are
// given: the cost of their node pays for them.
func (b *templateBudget) funcs() template.FuncMap {
	bounded := func(name string, bound int, format func() string) (string, error) {
		tooLong := func() error {
			return b.stop(fmt.Errorf("%w: %s would make a string longer than %d bytes", ErrTemplateBudgetExceeded, name, maxRenderedTemplateBytes))
		}
		if bound > 6*maxRenderedTemplateBytes {
			return "", tooLong()
		}
		out := format()
		if len(out) > maxRenderedTemplateBytes {
			return "", tooLong()
		}
		return out, b.spend(1 + len(out)/templateBytesPerStep)
	}
	escaper := func(name string, escape func(...any) string) func(...any) (string, error) {
		return func(args ...any) (string, error) {
			return bounded(name, 6*formattedBytes(args, 1), func() string { return escape(args...) })
		}
	}
	return template.FuncMap{
		spendFunc: func(steps int) (string, error) {
			return "", b.spend(steps)
		},
		"print": func(args ...any) (string, error) {
			return bounded("print", formattedBytes(args, 1), func() string { return fmt.Sprint(args...) })
		},
		"println": func(args ...any) (string, error) {
			return bounded("println", formattedBytes(args, 1)+1, func() string { return fmt.Sprintln(args...) })
		},
		"printf": func(format string, args ...any) (string, error) {
			return bounded("printf", printfBytes(format, args), func() string { return fmt.Sprintf(format, args...) })
		},
		"html":     escaper("html", template.HTMLEscaper),
		"js":       escaper("js", template.JSEscaper),
		"urlquery": escaper("urlquery", template.URLQueryEscaper),
	}
}

// formattedBytes is at least the length of args printed with %v, and factor times that when each
// byte may become factor bytes. A template's values are its data (a map of one string), strings,
// numbers and booleans: only strings can be long, and their length is known without printing.
func formattedBytes(args []any, factor int) int {
	n := len(args)
	for _, arg := range args {
		if s, ok := arg.(string); ok {
			n += factor * len(s)
			continue
		}
		n += factor * len(fmt.Sprint(arg))
	}
	return n
}

// printfBytes is more than fmt.Sprintf(format, args...) can write: the format, and for each
// verb its largest width or precision (fmt honours none past fmtMaxWidth) plus its argument
// escaped (%q, % #x: at most 6 bytes a byte), whichever argument it takes; and what fmt writes
// about arguments left over.
func printfBytes(format string, args []any) int {
	widest, longest := 0, 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		// Flags, argument indexes, widths and precisions up to the verb.
		n := 0
		for i++; i < len(format) && strings.IndexByte("+-# 0123456789.*[]", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				widest = fmtMaxWidth
			case '0' <= c && c <= '9':
				n = min(n*10+int(c-'0'), fmtMaxWidth)
				widest = max(widest, n)
			default:
				n = 0
			}
		}
	}
	for _, arg := range args {
		longest = max(longest, formattedBytes([]any{arg}, 6))
	}
	verbs := strings.Count(format, "%")
	return len(format) + verbs*(widest+longest+16) + formattedBytes(args, 6) + 32*len(args)
}
