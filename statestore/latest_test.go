package statestore

import "testing"

// Which names are sessions of a link: its own and its slots', no other
// link's.
func TestSessionOf(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"orders", true}, {"orders.0", true}, {"orders.17", true},
		{"orders.", false}, {"orders.x", false}, {"orders.1a", false}, {"orders-eu", false}, {"order", false}, {"orders.1.2", false}, {"xorders.1", false},
	} {
		if got := SessionOf("orders", c.name); got != c.want {
			t.Errorf("SessionOf(orders, %q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// The checkpoint of a partition that moved between a link's sessions is
// the one furthest at the destination; a session's own wins a tie; other
// links' are never taken.
func TestLatestCheckpoint(t *testing.T) {
	id := UUID{1}
	v := &View{Links: map[string]LinkValue{}, Checkpoints: map[CheckpointKey]CheckpointValue{}}
	put := func(sess string, dst int64) {
		v.Links[sess] = LinkValue{}
		v.Checkpoints[CheckpointKey{LinkName: sess, TopicID: id, Partition: 2}] = CheckpointValue{DestNextOffset: dst}
	}
	if _, _, ok := v.LatestCheckpoint("l", "l.1", id, 2); ok {
		t.Fatal("a checkpoint where none is")
	}
	put("l", 100)      // before slots
	put("l.0", 250)    // slots = 2
	put("l.2", 180)    // slots = 3, earlier
	put("other", 900)  // another link
	put("l.1x", 900)   // not a session of l
	put("l-eu.1", 900) // nor this
	ck, of, ok := v.LatestCheckpoint("l", "l.1", id, 2)
	if !ok || of != "l.0" || ck.DestNextOffset != 250 {
		t.Errorf("latest: %v %q %v; want l.0's at 250", ok, of, ck.DestNextOffset)
	}
	put("l.1", 250)
	if _, of, _ := v.LatestCheckpoint("l", "l.1", id, 2); of != "l.1" {
		t.Errorf("a tie went to %q, want the session's own", of)
	}
	if _, _, ok := v.LatestCheckpoint("l", "l", UUID{2}, 2); ok {
		t.Error("a checkpoint of another topic")
	}
}
