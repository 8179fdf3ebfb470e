package appender

// Lanes reports the lanes' appends (txnlane.go): those in requests sent and
// not yet answered, those waiting in a collecting request, and how many
// lanes have a collecting request, all of whose places are taken (stuck
// until a request is answered).
func (t *Txn) Lanes() (sent, collecting, lanes int, stuck bool) {
	t.lanes.mu.Lock()
	defer t.lanes.mu.Unlock()
	stuck = true
	for _, ln := range t.lanes.m {
		sent += ln.sent
		if ln.next != nil && len(ln.next.appends) > 0 {
			collecting += len(ln.next.appends)
			lanes++
			stuck = stuck && len(ln.places) == cap(ln.places)
		}
	}
	return sent, collecting, lanes, stuck
}
