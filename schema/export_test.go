package schema

// NormalizeCUE is normalizeCUE, for the tests of package schema_test.
var NormalizeCUE = normalizeCUE
