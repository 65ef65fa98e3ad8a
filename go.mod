module stockpot

go 1.26.8

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
