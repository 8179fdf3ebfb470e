package link

import (
	"testing"

	"github.com/seed83556561/mirrord/translate"
)

// Guards the window's bound: it keeps the WindowSpans newest spans, oldest
// first, and never more.
func TestWindowKeepsNewest(t *testing.T) {
	var w window
	for i := range int64(3*WindowSpans + 5) {
		w.add(translate.Span{From: 10 * i, Base: 10 * i, End: 10*i + 10, DstBase: 7 * i, DstEnd: 7*i + 7})
		got := w.list()
		n := min(int(i)+1, WindowSpans)
		if len(got) != n || cap(w.spans) > WindowSpans {
			t.Fatalf("after %d spans: %d listed (cap %d), want %d", i+1, len(got), cap(w.spans), n)
		}
		for j, sp := range got {
			if want := i - int64(n-1-j); sp.Base != 10*want || sp.DstBase != 7*want {
				t.Fatalf("after %d spans: span %d is %+v, want the one of batch %d", i+1, j, sp, want)
			}
		}
	}
	w.reset()
	if len(w.list()) != 0 {
		t.Fatal("reset left spans")
	}
	w.add(translate.Span{Base: 1})
	if got := w.list(); len(got) != 1 || got[0].Base != 1 {
		t.Fatalf("after reset and add: %+v", got)
	}
}
