module watchcache.test/h2probe

go 1.26
