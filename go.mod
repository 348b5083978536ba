module github.com/tokenbudget/tokenbudget

go 1.26.0
