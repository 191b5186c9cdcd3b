-- 0031: a floor under a tenant's fair-queuing weight.
--
-- A tenant's tasks advance its virtual time by n / weight. The check allowed
-- any weight above 0, so a weight of 5e-324 (or 1e-306 and a batch of 200)
-- overflowed double precision: every enqueue of that tenant failed, and so
-- did the sweep's promote, one statement for every tenant's due tasks, which
-- then stalled the whole queue. Weights now run from 0.001 to 1000 (a
-- million to one); a weight below the floor is raised to it.
update tenants set weight = 0.001 where weight < 0.001;
alter table tenants drop constraint tenants_weight_positive;
alter table tenants add constraint tenants_weight_range check (weight >= 0.001 and weight <= 1000);
