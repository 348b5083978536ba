package main

import "encoding/csv"

// csvCell neutralises a cell a spreadsheet would run as a formula: one
// starting with =, +, -, @, a tab or a CR (the OWASP list) gets a leading
// '. Models and end users are chosen by clients, so a CSV report must not
// hand them a formula in the operator's spreadsheet. The JSON-lines export,
// which import reads, stays exact.
func csvCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

// writeCSVRecord writes rec with every cell neutralised by csvCell.
func writeCSVRecord(w *csv.Writer, rec []string) error {
	for i, c := range rec {
		rec[i] = csvCell(c)
	}
	return w.Write(rec)
}
