package nodeconfig

import (
	"slices"
	"strconv"
)

// splitCmdline is the arguments of a kernel command line (or a part of
// one), in order, as the kernel splits it (next_arg in lib/cmdline.c) and
// as the Machine Config Operator splits a MachineConfig's kernelArguments:
// whitespace separates arguments, except between double quotes, which
// cannot be escaped; an unclosed quote runs to the end. Each argument is
// kept as written, quotes included (`dyndbg="file a.c +p"`): it is how
// people write it and how rules name it, and `a="1"` and `a=1`, which the
// kernel reads alike, compare as different. Whitespace is the C locale's
// (space, \t, \n, \v, \f, \r), as for the Machine Config Operator; the
// kernel's isspace also takes byte 0xA0 (Latin-1's no-break space, which
// would cut UTF-8 characters apart here).
//
// Every reader of a command line splits it here: a tree's (or an Ignition
// config's) /etc/kernel/cmdline and each entry of a MachineConfig's
// kernelArguments.
func splitCmdline(s string) []string {
	var args []string
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start, quoted := i, false
		for ; i < len(s) && (quoted || !isSpace(s[i])); i++ {
			if s[i] == '"' {
				quoted = !quoted
			}
		}
		if i > start {
			args = append(args, s[start:i])
		}
	}
	return args
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r'
}

// changedInOrder are the arguments that the command lines a and b, read in
// order with repeats, do not have alike, sorted, each once: those one has
// more often than the other, and those that come in another order
// relative to another argument both have as often. The n-th occurrence of
// an argument in a is the n-th in b: a repeat never swaps with itself.
// Swapping two arguments changes both; moving one changes it and those it
// passes; adding one changes it alone.
func changedInOrder(a, b []string) []string {
	if slices.Equal(a, b) {
		return nil
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	changed := map[string]bool{}
	for s, n := range count {
		if n != 0 {
			changed[s] = true
		}
	}
	differs := func(s string) bool { return changed[s] }
	ka, kb := slices.DeleteFunc(slices.Clone(a), differs), slices.DeleteFunc(slices.Clone(b), differs)
	// at[i] is where ka[i] is in kb; ka[i] changed order relative to
	// another argument when one before it lands after it, or one after
	// it before it.
	where := map[string][]int{}
	for j, s := range kb {
		where[s] = append(where[s], j)
	}
	at := make([]int, len(ka))
	for i, s := range ka {
		at[i], where[s] = where[s][0], where[s][1:]
	}
	latest := -1
	for i, j := range at {
		if latest > j {
			changed[ka[i]] = true
		}
		latest = max(latest, j)
	}
	earliest := len(at)
	for i := len(at) - 1; i >= 0; i-- {
		if earliest < at[i] {
			changed[ka[i]] = true
		}
		earliest = min(earliest, at[i])
	}
	out := make([]string, 0, len(changed))
	for s := range changed {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// fipsChange stands for a change of a MachineConfig's spec.fips among a
// change set's extensions, which no DisruptionPolicy rule matches: the
// change set has no field of its own for it.
func fipsChange(to bool) string { return "spec.fips=" + strconv.FormatBool(to) }
