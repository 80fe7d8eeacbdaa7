/* main.c: placeholder until the composition root lands. */
int main(void)
{
    return 0;
}
