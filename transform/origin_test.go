package transform

import "testing"

func TestReturnsOf(t *testing.T) {
	home, _ := RegionOf("MkU3OEVBNTcwNTJENDM2Qg") // the destination
	away, _ := RegionOf("7GNBCbPaRb6m1tU3XKDQ0A") // a third cluster
	checking := Returns{Home: home, Check: true}
	for _, tc := range []struct {
		name string
		r    Returns
		pid  int64
		want Return
	}{
		{"a producer of the source itself", checking, 4711, Away},
		{"producer ID 0", checking, 0, Away},
		{"mapped from the destination", checking, MapPID(4711, home), Home},
		{"mapped from the destination, producer ID 0", checking, MapPID(0, home), Home},
		{"mapped from the destination, largest low bits", checking, MapPID(1<<31-1, home), Home},
		{"mapped from a third cluster", checking, MapPID(4711, away), Away},
		{"mapped from the destination, but salted", checking, MapPIDSalted(4711, home, 5), Away},
		{"no producer ID, forwarded by default", checking, -1, Away},
		{"no producer ID, skipped by policy", Returns{Home: home, Check: true, SkipUnattributed: true}, -1, Unattributed},
		{"no producer ID, skipped by policy without the origin check", Returns{SkipUnattributed: true}, -1, Unattributed},
		{"the origin check off (same cluster, return_home)", Returns{Home: home}, MapPID(4711, home), Away},
		{"the zero value", Returns{}, MapPID(4711, 0), Away},
	} {
		if got := tc.r.Of(tc.pid); got != tc.want {
			t.Errorf("%s: Of(%d) = %d, want %d", tc.name, tc.pid, got, tc.want)
		}
	}
}
