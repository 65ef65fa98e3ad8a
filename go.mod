module stockpot

go 1.26.8
