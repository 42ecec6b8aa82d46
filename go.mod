module reprise

go 1.26
