module dlock

go 1.21
