package hostfiles

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseIDs(t *testing.T) {
	ids := map[string]int{"kept": 7}
	parseIDs([]byte(`root:x:0:0:root:/root:/bin/bash
# a comment
  
+@netgroup::::::
-excluded:x:9:9::/:/bin/false
kept:x:1000:1000::/:/bin/sh
broken:x
noid:x:abc:1::/:/bin/sh
minus1:x:4294967295:1::/:/bin/sh
chrony:x:992:989::/var/lib/chrony:/sbin/nologin
chrony:x:1:1::/:/bin/sh
wheel:x:10:alice,bob`), ids)
	require.Equal(t, map[string]int{"root": 0, "kept": 7, "chrony": 992, "wheel": 10}, ids)
}

func TestNumericID(t *testing.T) {
	for s, want := range map[string]int{"0": 0, "1000": 1000, "4294967294": 4294967294} {
		id, ok := numericID(s)
		require.True(t, ok, s)
		require.Equal(t, want, id, s)
	}
	for _, s := range []string{"", "-1", "4294967295", "4294967296", "1e3", "root", " 1"} {
		_, ok := numericID(s)
		require.False(t, ok, s)
	}
}
