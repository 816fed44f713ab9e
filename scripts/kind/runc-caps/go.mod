module vk-kind/runc-caps

go 1.26
