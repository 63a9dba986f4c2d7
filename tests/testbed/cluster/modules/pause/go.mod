module mpiwait.test/cluster/pause

go 1.25.0
