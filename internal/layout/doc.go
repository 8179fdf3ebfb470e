// Package layout keeps the house rules of the repository's code as
// tests, so that `go test ./internal/layout` fails on the change that
// breaks one:
//
//   - dependency directions between mirrord's packages (TestDependencyDirections,
//     read from `go list -json ./...`): transform imports no other mirrord
//     package and twin none but transform, fetcher and appender never
//     import each other, no component imports config or the product's top
//     layer, no component imports link (link runs them; translate and
//     failover are handed what they need), translate never imports
//     failover, internal plumbing imports no component, only tests (and the
//     bench and the fault suite) import the test kits;
//   - the pure packages (transform, twin, barrier) import nothing that does
//     I/O (TestDependencyDirections, TestPureRuleCatches);
//   - no declared name shadows a Go builtin (TestNoBuiltinShadowed);
//   - no package is named like franz-go's (a k-prefix) or as a util/common
//     grab bag (TestPackageNames);
//   - every package has a doc comment that says which goroutines it runs
//     (TestPackageDocs).
//
// Each rule is also tested on synthetic import graphs and sources, so a
// rule that could never fail is noticed (TestRulesCatchViolations,
// TestShadowCheckCatches, TestDocCheckCatches, TestNameRuleCatches).
//
// The package has no code outside its tests and runs no goroutines; the
// tests run `go list` and `go env` as child processes and wait for them.
package layout
